"""The paper's seven sets as lm-evaluation-harness tasks, and lm-eval's samples scored by ``del-eval score``.

One real ``lm_eval`` run (the CLI, hf backend, SmolLM2-135M-Instruct from the local assets, the chat format, two
problems a set, 16 new tokens, batch size 1, float32) on the seven ``del_*`` tasks and on lm-eval's own ``gsm8k``
task (its YAML, with the dataset read from the GSM8K files the package ships instead of the hub), and one
``del-eval run`` with the same model and settings, feed the tests below. SimulEq and SAT are the small stand-ins of
tests/helpers/paper_sets.py, since the real files are not shipped.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from del_plugin.evaluation import BENCHMARK_NAMES, cli, load_report, read_generations
from del_plugin.evaluation.benchmarks.names import DATA_DIR
from del_plugin.evaluation.benchmarks.sets import BENCHMARKS, load_benchmark
from del_plugin.evaluation.lm_eval.samples import read_lm_eval_samples
from del_plugin.evaluation.lm_eval.tasks import write_lm_eval_tasks
from del_plugin.evaluation.run.generation import STOP_STRINGS, PromptFormat
from tools.assets import GSM8K_TRAIN_DIR, load_tokenizer, smollm2_dir

from paper_sets import write_benchmark_dir
from repo import REPO

LIMIT, NEW_TOKENS = 2, 16


def lm_eval_gsm8k_yaml(folder: Path) -> Path:
    """lm-eval's own gsm8k task (its YAML, included), reading GSM8K from local files instead of the hub (the test
    split the package ships, the train split the clone carries), with short generations."""
    import lm_eval

    data = DATA_DIR / "gsm8k"
    path = folder / "gsm8k_local.yaml"
    path.write_text(
        f"include: {Path(lm_eval.__file__).parent / 'tasks' / 'gsm8k' / 'gsm8k.yaml'}\n"
        "task: gsm8k\ndataset_path: json\ndataset_name: null\ndataset_kwargs:\n  data_files:\n"
        f"    train: {GSM8K_TRAIN_DIR / 'train.jsonl.gz'}\n    test: {data / 'test.jsonl.gz'}\n"
        'generation_kwargs:\n  until: ["Question:", "</s>", "<|im_end|>"]\n  do_sample: false\n'
        f"  temperature: 0.0\n  max_gen_toks: {NEW_TOKENS}\n"
    )
    return path


@pytest.fixture(scope="module")
def benchmark_dir(tmp_path_factory):
    return write_benchmark_dir(tmp_path_factory.mktemp("paper-benchmarks"))


@pytest.fixture(scope="module")
def lm_eval_run(tmp_path_factory, benchmark_dir):
    """``del-eval lm-eval-tasks`` then the ``lm_eval`` CLI: ``(tasks folder, output folder, results)``."""
    tmp = tmp_path_factory.mktemp("lm-eval")
    tasks, out = tmp / "tasks", tmp / "out"
    argv = ["lm-eval-tasks", "--out", str(tasks), "--benchmark-dir", str(benchmark_dir), "--prompt-format", "chat"]
    # the SimulEq and SAT fixtures are not the authors' files: refused, then written when allowed
    assert cli.main(argv) == 3 and not tasks.exists()
    assert cli.main(argv + ["--max-new-tokens", str(NEW_TOKENS), "--allow-modified"]) == 0
    lm_eval_gsm8k_yaml(tasks)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    command = [
        *(sys.executable, "-m", "lm_eval", "--model", "hf"),
        *("--model_args", f"pretrained={smollm2_dir()},dtype=float32,add_bos_token=False"),
        *("--tasks", "del_paper,gsm8k", "--include_path", str(tasks), "--apply_chat_template"),
        *("--limit", str(LIMIT), "--batch_size", "1", "--device", "cpu", "--log_samples", "--output_path", str(out)),
    ]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-8000:]
    (results,) = out.rglob("results_*.json")
    return tasks, out, json.loads(results.read_text())


@pytest.fixture(scope="module")
def del_eval_run(tmp_path_factory, benchmark_dir):
    """``del-eval run`` with the settings of the lm-eval run; its generations by (set, id)."""
    from del_plugin.evaluation import EvalSettings, evaluate

    out = tmp_path_factory.mktemp("del-eval")
    settings = EvalSettings(
        batch_size=1,
        max_new_tokens=NEW_TOKENS,
        prompt_format="chat",
        limit=LIMIT,
        teacher_forced=False,
        dtype="float32",
        device="cpu",
    )
    evaluate(
        smollm2_dir(),
        out_dir=out,
        benchmarks="all",
        benchmark_dir=benchmark_dir,
        settings=settings,
        allow_modified=True,
    )
    return out, {(g["dataset"], g["id"]): g for g in read_generations(out)}


def smollm2_tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(smollm2_dir()))


def lm_eval_samples(out: Path, task: str) -> list[dict]:
    (path,) = out.rglob(f"samples_{task}_*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_lm_eval_finds_the_per_problem_correctness_of_del_eval_run(lm_eval_run, del_eval_run):
    _, out, results = lm_eval_run
    _, ours = del_eval_run
    for name in BENCHMARK_NAMES:
        samples = lm_eval_samples(out, f"del_{name}")
        assert sorted(s["doc"]["id"] for s in samples) == list(range(LIMIT))
        for sample in samples:
            mine = ours[(name, sample["doc"]["id"])]
            # the same prompt and decoding give the same text, and the same reader the same verdict
            assert sample["resps"][0][0] == mine["generation"], (name, sample["doc"]["id"])
            assert sample["acc"] == float(mine["correct"]), (name, sample["doc"]["id"])
            assert sample["math_verify"] == float(mine["math_verify_correct"]), (name, sample["doc"]["id"])
        assert results["configs"][f"del_{name}"]["generation_kwargs"]["until"] == list(STOP_STRINGS)
    for metric in ("acc,none", "math_verify,none"):  # the paper's rules, and math-verify beside them
        accuracies = [results["results"][f"del_{name}"][metric] for name in BENCHMARK_NAMES]
        assert results["results"]["del_paper"][metric] == pytest.approx(sum(accuracies) / 7)  # mACC


def test_score_lm_eval_samples_reproduces_lm_eval_and_compares_with_del_eval_run(
    lm_eval_run, del_eval_run, benchmark_dir, tmp_path
):
    _, out, results = lm_eval_run
    del_eval_out, _ = del_eval_run
    argv = ["score", "--lm-eval-samples", str(out), "--benchmark-dir", str(benchmark_dir), "--out"]
    assert cli.main(argv + [str(tmp_path / "scored")]) == 3  # the fixtures are not the authors' files
    assert cli.main(argv + [str(tmp_path / "scored"), "--allow-modified"]) == 0
    report = load_report(tmp_path / "scored")
    assert [d["benchmark"] for d in report["datasets"]] == list(BENCHMARK_NAMES)
    for entry in report["datasets"]:
        assert entry["evaluated"] == LIMIT
        assert entry["generation"]["accuracy"] == results["results"][f"del_{entry['benchmark']}"]["acc,none"]
        assert entry["math_verify"]["accuracy"] == results["results"][f"del_{entry['benchmark']}"]["math_verify,none"]
    assert report["macc"]["label"] == "mACC (partial coverage)"  # --limit: a few problems of each set
    assert report["macc"]["value"] == pytest.approx(results["results"]["del_paper"]["acc,none"])
    assert report["macc"]["math_verify"] == pytest.approx(results["results"]["del_paper"]["math_verify,none"])
    ran = load_report(del_eval_out)  # and del-eval run, on the same generations, on both
    assert [(d["generation"]["accuracy"], d["math_verify"]) for d in ran["datasets"]] == [
        (d["generation"]["accuracy"], d["math_verify"]) for d in report["datasets"]
    ]
    assert report["settings"]["prompt_format"] == "chat" and report["settings"]["max_new_tokens"] == NEW_TOKENS
    # the fixtures are not the authors' SimulEq and SAT, which the report says, and --limit scored a few
    # problems of each set; nothing else is wrong
    assert sorted(w.split(":")[0] for w in report["warnings"]) == ["partial coverage", "sat", "simuleq"]
    # the same scoring again: the report as it was, every generation once
    lines = (tmp_path / "scored" / "generations.jsonl").read_text().splitlines()
    assert len(lines) == len(BENCHMARK_NAMES) * LIMIT
    assert cli.main(argv + [str(tmp_path / "scored"), "--allow-modified"]) == 0
    assert (tmp_path / "scored" / "generations.jsonl").read_text().splitlines() == lines
    assert load_report(tmp_path / "scored")["datasets"] == report["datasets"]
    # del-eval compare puts the lm-eval run beside the del-eval run: the same numbers
    assert cli.main(["compare", str(del_eval_out), str(tmp_path / "scored"), "--out", str(tmp_path / "cmp")]) == 0
    compared = json.loads((tmp_path / "cmp" / "comparison.json").read_text())
    maccs = [m["macc"]["value"] for m in compared["models"]]
    assert maccs[0] == pytest.approx(maccs[1])
    # and its verdict pairs them problem by problem: the same verdict on every problem, no discordant pair
    verdict = compared["verdict"]
    assert [s["discordant"] for s in verdict["sets"]] == [{"candidate_only": 0, "baseline_only": 0}] * 7
    assert verdict["summary"]["difference"]["value"] == 0 and not verdict["summary"]["resolved"]


def test_lm_eval_gsm8k_samples_are_matched_to_gsm8k_by_question(lm_eval_run, tmp_path):
    _, out, _ = lm_eval_run
    folder = tmp_path / "gsm8k-only"
    folder.mkdir()
    (samples,) = out.rglob("samples_gsm8k_*.jsonl")
    shutil.copy(samples, folder)
    (found,) = read_lm_eval_samples(folder)
    rows = lm_eval_samples(out, "gsm8k")
    assert len(rows) == 2 * LIMIT  # one line per doc and filter: the raw generation is read once
    assert (found.benchmark, found.task, sorted(found.outputs)) == ("gsm8k", "gsm8k", list(range(LIMIT)))
    gsm8k = load_benchmark("gsm8k", limit=LIMIT)
    for row in rows:
        problem = gsm8k.problems[row["doc_id"]]
        assert row["doc"]["question"].strip() == problem.question
        assert found.outputs[problem.id] == row["resps"][0][0]
    assert cli.main(["score", "--lm-eval-samples", str(folder), "--out", str(tmp_path / "scored")]) == 0
    report = load_report(tmp_path / "scored")
    assert [w.split(":")[0] for w in report["warnings"]] == ["partial coverage", "gsm8k"]
    assert "lm-eval's own" in report["warnings"][1]
    for record in read_generations(tmp_path / "scored"):
        assert record["correct"] == BENCHMARKS["gsm8k"].score(record["generation"], record["reference"]).correct


def test_samples_of_two_models_are_not_scored_into_one_report(lm_eval_run, tmp_path, capsys):
    _, out, _ = lm_eval_run
    (results,) = out.rglob("results_*.json")
    for task, model in [("del_svamp", "model-a"), ("del_gsm8k", "model-b")]:  # lm-eval's folder per model
        folder = tmp_path / "runs" / model
        folder.mkdir(parents=True)
        (samples,) = out.rglob(f"samples_{task}_*.jsonl")
        shutil.copy(samples, folder)
        config = json.loads(results.read_text())
        config["config"]["model_args"] = f"pretrained=/models/{model}"
        (folder / results.name).write_text(json.dumps(config))
    assert cli.main(["score", "--lm-eval-samples", str(tmp_path / "runs"), "--out", str(tmp_path / "r")]) == 3
    error = capsys.readouterr().err
    assert "come from 2 models" in error and "/models/model-a" in error and "del_gsm8k" in error
    assert not (tmp_path / "r").exists()
    assert (
        cli.main(["score", "--lm-eval-samples", str(tmp_path / "runs" / "model-a"), "--out", str(tmp_path / "a")]) == 0
    )


@pytest.mark.parametrize(
    "model_args, name, base, adapter",
    [
        (
            "pretrained=/models/SmolLM2,peft=outputs/my-del/sweep0001,dtype=float32",
            "sweep0001",
            "/models/SmolLM2",
            "outputs/my-del/sweep0001",
        ),
        (
            {"pretrained": "/models/SmolLM2", "peft": "outputs/my-del/sweep0002"},
            "sweep0002",
            "/models/SmolLM2",
            "outputs/my-del/sweep0002",
        ),
        ({"pretrained": "/models/SmolLM2", "lora_local_path": "/lora/del"}, "del", "/models/SmolLM2", "/lora/del"),
        ("pretrained=/models/merged-del,dtype=bfloat16", "merged-del", "/models/merged-del", None),
    ],
)
def test_a_report_from_samples_is_named_after_the_adapter_lm_eval_ran(model_args, name, base, adapter, tmp_path):
    """Samples written here in lm-eval's layout (two SVAMP problems, the run's model_args as a string, lm-eval's
    older form, or a dict): the report's model and name are lm-eval's model and adapter, as del-eval run's are."""
    folder = tmp_path / "lm-eval-out" / "model"
    folder.mkdir(parents=True)
    date = "2026-01-01T00-00-00.000000"
    problems = load_benchmark("svamp", limit=2).problems
    rows = [
        {"doc_id": p.id, "doc": {"id": p.id, "question": p.question, "reference": p.reference}, "resps": [["7"]]}
        for p in problems
    ]
    (folder / f"samples_del_svamp_{date}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    results = {"config": {"model": "hf", "model_args": model_args}, "configs": {"del_svamp": {}}}
    (folder / f"results_{date}.json").write_text(json.dumps(results))
    assert cli.main(["score", "--lm-eval-samples", str(tmp_path / "lm-eval-out"), "--out", str(tmp_path / "r")]) == 0
    report = load_report(tmp_path / "r")
    assert report["name"] == name
    assert (report["model"]["path"], report["model"]["adapter"]) == (base, adapter)
    shown = f"`{base} + adapter {adapter}`" if adapter else f"`{base}`"
    assert f"(generations of {shown} made elsewhere)" in (tmp_path / "r" / "report.md").read_text()


def test_samples_of_another_file_and_prompts_of_another_format_are_caught(lm_eval_run, benchmark_dir, tmp_path):
    _, out, _ = lm_eval_run
    (samples,) = out.rglob("samples_del_svamp_*.jsonl")
    (results,) = out.rglob("results_*.json")
    folder = tmp_path / "svamp"
    folder.mkdir()
    # the same samples, the task said to be an alpaca task: its chat prompts are not what it sends
    config = json.loads(results.read_text())
    config["configs"]["del_svamp"]["metadata"]["prompt_format"] = "alpaca"
    (folder / results.name).write_text(json.dumps(config))
    shutil.copy(samples, folder)
    assert cli.main(["score", "--lm-eval-samples", str(folder), "--out", str(tmp_path / "a")]) == 0
    coverage, warning = load_report(tmp_path / "a")["warnings"]
    assert coverage.startswith("partial coverage: svamp")
    assert "not what a alpaca task sends" in warning and "without --apply_chat_template" in warning
    # a doc whose question is not the set's problem of that id: the tasks came from another file
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    rows[0]["doc"]["question"] += " (edited)"
    (folder / samples.name).write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError, match=r"doc 0 is not svamp's problem 0 .*written from another file"):
        read_lm_eval_samples(folder)


# SmolLM2's chat template: the lm_eval run above (the same generations imply the same prompts)
@pytest.mark.parametrize("prompt_format, tokenizer", [("alpaca", "smollm2"), ("chat", "qwen2"), ("chat", "phi-3")])
def test_the_tasks_send_del_eval_runs_prompts(prompt_format, tokenizer, benchmark_dir, tmp_path):
    """lm-eval's own request building (its chat template call for chat tasks) on the tasks written, against
    del-eval's PromptFormat, for every set."""
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import TaskManager, get_task_dict

    tok = smollm2_tokenizer() if tokenizer == "smollm2" else load_tokenizer(tokenizer)

    class ChatModel:  # what HFLM.apply_chat_template reads of the model
        tokenizer, chat_template_args = tok, {}

    def chat_template(history, add_generation_prompt=True):
        return HFLM.apply_chat_template(ChatModel(), history, add_generation_prompt)

    settings = dict(prompt_format=prompt_format, max_new_tokens=NEW_TOKENS, allow_modified=True)  # the fixtures
    write_lm_eval_tasks(tmp_path, benchmark_dir=benchmark_dir, **settings)
    ((_, tasks),) = get_task_dict(
        ["del_paper"], TaskManager(include_path=str(tmp_path), include_defaults=False)
    ).items()
    prompt = PromptFormat(tok, prompt_format)
    assert sorted(tasks) == sorted(f"del_{n}" for n in BENCHMARK_NAMES)
    for name, task in tasks.items():
        chat = prompt_format == "chat"
        task.build_all_requests(limit=LIMIT, apply_chat_template=chat, chat_template=chat_template if chat else None)
        loaded = load_benchmark(name.removeprefix("del_"), benchmark_dir, LIMIT)
        assert len(task.instances) == LIMIT
        for instance, problem in zip(task.instances, loaded.problems):
            context, generation = instance.args
            assert context == prompt.text(problem.question, loaded.benchmark.response_prefix), (name, problem.id)
            assert generation == {
                "until": list(STOP_STRINGS),
                "do_sample": False,
                "temperature": 0.0,
                "max_gen_toks": NEW_TOKENS,
            }


def test_a_missing_set_is_an_error_naming_it_and_nothing_is_written(tmp_path):
    with pytest.raises(FileNotFoundError) as err:
        write_lm_eval_tasks(tmp_path / "tasks", benchmarks="all")
    assert "simuleq (SimulEq) and sat (SAT) are not shipped" in str(err.value)
    with pytest.raises(FileNotFoundError, match=rf"sat \(SAT\): {tmp_path}/sat/sat.json not found"):
        write_lm_eval_tasks(tmp_path / "tasks", benchmarks="gsm8k,sat", benchmark_dir=tmp_path)
    assert not (tmp_path / "tasks").exists()
    assert cli.main(["lm-eval-tasks", "--out", str(tmp_path / "tasks"), "--benchmarks", "gsm8k,sat"]) == 3


def test_tasks_written_again_for_fewer_sets_leave_none_of_the_others(tmp_path, capsys):
    out = tmp_path / "tasks"
    assert cli.main(["lm-eval-tasks", "--out", str(out), "--benchmarks", "gsm8k,svamp,aqua"]) == 0
    (out / "notes.yaml").write_text("mine: true\n")  # a file of the user's: kept
    assert cli.main(["lm-eval-tasks", "--out", str(out), "--benchmarks", "gsm8k"]) == 0
    assert sorted(p.name for p in out.iterdir()) == [
        "del_gsm8k.yaml",
        "del_paper.yaml",
        "del_paper_tasks.py",
        "notes.yaml",
    ]
    (tmp_path / "a-file").write_text("")
    capsys.readouterr()
    assert cli.main(["lm-eval-tasks", "--out", str(tmp_path / "a-file"), "--benchmarks", "gsm8k"]) == 4
    assert "is a file, not a folder" in capsys.readouterr().err


def test_bad_task_settings_and_score_arguments_are_refused(tmp_path, capsys):
    with pytest.raises(ValueError, match="no auto"):
        write_lm_eval_tasks(tmp_path, benchmarks="gsm8k", prompt_format="auto")
    with pytest.raises(ValueError, match="--max-new-tokens must be an integer >= 1"):
        write_lm_eval_tasks(tmp_path, benchmarks="gsm8k", max_new_tokens=0)
    assert cli.main(["score", "--lm-eval-samples", str(tmp_path), "--benchmark", "gsm8k", "--out", "x"]) == 2
    assert "without --benchmark, --predictions" in capsys.readouterr().err
    assert cli.main(["score", "--lm-eval-samples", str(tmp_path), "--unsandboxed-programs", "--out", "x"]) == 2
    assert "--unsandboxed-programs" in capsys.readouterr().err
    assert cli.main(["score", "--lm-eval-samples", str(tmp_path), "--out", str(tmp_path / "x")]) == 3
    assert "no lm-eval samples" in capsys.readouterr().err
    assert cli.main(["score", "--out", str(tmp_path / "x")]) == 2
    assert "needs --benchmark and --predictions" in capsys.readouterr().err


def test_a_task_folder_that_imports_the_helpers_old_home_still_loads(tmp_path):
    """Folders written before del-eval was laid out in parts import ``docs_processor`` and ``results_processor``
    from ``del_plugin.evaluation.lm_eval_tasks``: lm-eval loads such a folder, and its tasks hold the same docs as
    those of a folder written now."""
    from lm_eval.tasks import TaskManager, get_task_dict

    new_home = "from del_plugin.evaluation.lm_eval.tasks import docs_processor, results_processor"
    old_home = "from del_plugin.evaluation.lm_eval_tasks import docs_processor, results_processor"
    docs = {}
    for folder in ("now", "before"):
        write_lm_eval_tasks(tmp_path / folder, benchmarks="gsm8k")
        helpers = tmp_path / folder / "del_paper_tasks.py"
        text = helpers.read_text(encoding="utf-8")
        assert new_home in text
        if folder == "before":
            helpers.write_text(text.replace(new_home, old_home), encoding="utf-8")
        manager = TaskManager(include_path=str(tmp_path / folder), include_defaults=False)
        ((_, tasks),) = get_task_dict(["del_paper"], manager).items()
        docs[folder] = list(tasks["del_gsm8k"].test_docs())[:3]
    assert docs["before"] == docs["now"] and len(docs["now"]) == 3
