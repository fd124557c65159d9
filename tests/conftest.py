import os

# Triton's CPU interpreter, for the whole suite: Triton reads TRITON_INTERPRET when it is first imported (liger_kernel
# and Axolotl's integrations import it), and without it every Triton kernel fails here ("0 active drivers"). With it,
# Liger's real kernels run on the CPU (slowly: tiny shapes). setdefault: TRITON_INTERPRET=0 in the environment turns
# it off. This must stay above every import that could import triton.
os.environ.setdefault("TRITON_INTERPRET", "1")
# The environment `make test` exports, for a plain `pytest` too: no hub (a lookup would wait for a network that is
# not there), no telemetry, no tokenizer thread pools beside torch's.
for _key, _value in {"HF_HUB_OFFLINE": "1", "AXOLOTL_DO_NOT_TRACK": "1", "TOKENIZERS_PARALLELISM": "false"}.items():
    os.environ.setdefault(_key, _value)

import gc  # noqa: E402
import importlib.abc  # noqa: E402
import importlib.metadata  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402

# the tests' shared helpers (tests/helpers/), imported by module name; a test file never imports another test file
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "helpers"))

from repo import REPO  # noqa: E402

# The host lanes (CONTRIBUTING.md, "Tests"): `make test-hosts-latest` runs the host tests on the newest transformers,
# TRL, accelerate and peft (requirements-latest.lock), `make test-llamafactory` the LLaMA-Factory host's on
# LLaMA-Factory 0.9.5 and what it pins (requirements-llamafactory.lock); each lock is installed ahead of the project's
# environment on PYTHONPATH, with no Axolotl. A lane proves both: it stops before the first test unless every pin of
# its lock file is the version imported, and an import of Axolotl fails there (tests that need Axolotl carry the
# `axolotl` marker, which the lanes deselect; one that does not fails instead of testing the other lane's stack).
LANE = os.environ.get("DEL_TEST_LANE")
LANE_LOCKS = {"hosts-latest": "requirements-latest.lock", "llamafactory": "requirements-llamafactory.lock"}
# LLaMA-Factory's requirements that its SFT path does not import (the web UI, image and video data, the ModelScope
# hub, the v1 launcher), left out of its lane: any other unmet requirement stops the lane
LANE_NOT_INSTALLED = {"llamafactory": {"av", "gradio", "modelscope", "torchdata", "torchvision", "tyro"}}


class _NoAxolotl(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "axolotl" or name.startswith("axolotl."):
            raise ModuleNotFoundError(f"No module named {name!r} (the {LANE} lane runs without Axolotl)", name=name)
        return None


def lane_pins(lane: str) -> dict[str, str]:
    """The lane's lock file's pins: {distribution: version}."""
    lines = (REPO / LANE_LOCKS[lane]).read_text(encoding="utf-8").splitlines()
    return dict(line.split("==") for line in (ln.split("#")[0].strip() for ln in lines) if line)


if LANE is not None:
    if LANE not in LANE_LOCKS:
        raise pytest.UsageError(f"DEL_TEST_LANE={LANE!r}: the lanes are {', '.join(LANE_LOCKS)}")
    sys.meta_path.insert(0, _NoAxolotl())


def unmet_requirements(names, not_installed=frozenset()) -> list[str]:
    """The requirements of the distributions ``names`` that the importable versions do not meet (a newer release
    pinned in a lane's lock that needs a newer dependency the lock does not pin yet), less those ``not_installed``."""
    from packaging.requirements import Requirement

    unmet = []
    for name in names:
        for text in importlib.metadata.requires(name) or []:
            requirement = Requirement(text)
            if requirement.marker is not None and not requirement.marker.evaluate({"extra": ""}):
                continue
            if requirement.name in not_installed:
                continue
            try:
                version = importlib.metadata.version(requirement.name)
            except importlib.metadata.PackageNotFoundError:
                version = None
            if version is None or not requirement.specifier.contains(version, prereleases=True):
                unmet.append(f"{name} needs {requirement} (found {version})")
    return unmet


def pytest_configure(config):
    if LANE is None:
        return
    lock, pins = LANE_LOCKS[LANE], lane_pins(LANE)
    wrong = {
        name: importlib.metadata.version(name) for name, pin in pins.items() if importlib.metadata.version(name) != pin
    }
    if wrong or "axolotl" in sys.modules:
        raise pytest.UsageError(
            f"the {LANE} lane imports {wrong or 'Axolotl'} instead of {lock}'s pins: run it with "
            f"`make test-{LANE}` (its packages ahead of the project's on PYTHONPATH)"
        )
    unmet = unmet_requirements(pins, LANE_NOT_INSTALLED.get(LANE, frozenset()))
    if unmet:
        raise pytest.UsageError(f"pin these in {lock} too: " + "; ".join(unmet))


# The files that take longest, longest first: `make test` gives pytest-xdist's workers a file at a time in collection
# order, so a long file collected last runs alone at the end while the other worker waits. Starting with these is
# the longest-first rule of scheduling; the other files follow in their usual order. (Rough order from
# `pytest --durations`, 2-core machine; a file missing here only costs balance, never a test.)
LONGEST_FILES_FIRST = (
    "test_llamafactory_training.py",  # (the LLaMA-Factory lane's longest; skipped on the others)
    "test_examples.py",
    "test_paper.py",
    "test_deepspeed_cpu_e2e.py",
    "test_cpu_recipe.py",
    "test_lm_eval.py",
    "test_fused_losses.py",
    "test_fsdp2_cpu_e2e.py",
    "test_plugin_e2e.py",
    "test_del_check.py",
    "test_trl_sft.py",
    "test_criteria.py",
    "test_architectures.py",
    "test_ddp_cpu_e2e.py",
)


def pytest_collection_modifyitems(config, items):
    rank = {name: i for i, name in enumerate(LONGEST_FILES_FIRST)}
    order = {id(item): i for i, item in enumerate(items)}
    items.sort(key=lambda item: (rank.get(item.path.name, len(rank)), order[id(item)]))


CCE = "axolotl.integrations.cut_cross_entropy.CutCrossEntropyPlugin"


@pytest.fixture(autouse=True)
def forget_cut_cross_entropy():
    """Axolotl's plugin manager is process-wide: once a config listing Cut Cross Entropy was validated, its plugin
    would stay registered and run (and fail: its fork is not installed here) for every later config."""
    yield
    if "axolotl.integrations.base" in sys.modules:
        from axolotl.integrations.base import PluginManager

        PluginManager.get_instance().plugins.pop(CCE, None)


@pytest.fixture(autouse=True)
def freeze_the_heap_before_each_test():
    """Axolotl and transformers call ``gc.collect()`` several times a run, each a full pass over every object of
    the process: with the suite's imports and earlier tests that was half of a small Axolotl run's time. Frozen,
    the objects that exist before a test are left out of those passes; what the test makes is still collected,
    and afterwards (a pass over its own objects only)."""
    gc.freeze()
    yield
    gc.collect()


@pytest.fixture(autouse=True, scope="module")
def collect_garbage_between_modules():
    """A full collection per module, frozen objects included: garbage cycles through objects made before a test
    (which :func:`freeze_the_heap_before_each_test` leaves out) are freed here."""
    gc.unfreeze()
    gc.collect()
    gc.freeze()
    yield


def _restored_environment():
    """Axolotl sets process environment variables for a run and never unsets them (``ACCELERATE_USE_FSDP``,
    ``FSDP_*`` and ``PARALLELISM_CONFIG_*`` when a config with an ``fsdp_config`` is only loaded): left behind, a
    later in-process run or a launched DDP run becomes an FSDP run."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


restore_environment_per_test = pytest.fixture(autouse=True)(_restored_environment)
# module fixtures (an Axolotl run shared by a file's tests) set up before the per-test snapshot is taken
restore_environment_per_module = pytest.fixture(autouse=True, scope="module")(_restored_environment)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory):
    """The package's wheel, built from the clone once per run (tests/helpers/wheel_build.py); the tests that take it
    are e2e, so ``make test-fast`` builds none."""
    from wheel_build import shared_wheel

    return shared_wheel(tmp_path_factory)


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """``base(**overrides)``: the tests' small CPU LoRA config with the plugin on (tests/helpers/axolotl_helpers.py),
    on the tiny Llama-2-tokenizer model and four GSM8K rows."""
    from tools.assets import tiny_model_dir
    from tools.cpu import write_alpaca_jsonl

    from axolotl_helpers import cpu_config
    from gsm8k_rows import gsm8k_rows

    tmp = tmp_path_factory.mktemp("cfg")
    data = write_alpaca_jsonl(tmp / "d.jsonl", gsm8k_rows(4))
    return lambda **kw: cpu_config(tmp, tiny_model_dir("llama-spm"), data, **kw)


@pytest.fixture(scope="module")
def process_group(tmp_path_factory):
    """A one-process gloo group, for FSDP2 in this process (a file store: no port to claim)."""
    import torch.distributed as dist

    assert not dist.is_initialized()
    store = dist.FileStore(str(tmp_path_factory.mktemp("gloo") / "store"), 1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()


@pytest.fixture(scope="module")
def digit_model(tmp_path_factory):
    """The tiny random Llama, rewired so that it writes only the digits 1 and 2: the final norm keeps one hidden
    unit and the LM head maps its sign to '1' or '2'. Its answers are numbers, wrong ones mostly."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tools.assets import tiny_model_dir

    source = tiny_model_dir("llama-spm")
    model = AutoModelForCausalLM.from_pretrained(str(source))
    tokenizer = AutoTokenizer.from_pretrained(str(source))
    one, two = tokenizer.convert_tokens_to_ids(["1", "2"])
    with torch.no_grad():
        model.model.norm.weight.zero_()
        model.model.norm.weight[0] = 1.0
        model.lm_head.weight.zero_()
        model.lm_head.weight[one, 0] = 10.0
        model.lm_head.weight[two, 0] = -10.0
    out = tmp_path_factory.mktemp("digit-model")
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out
