"""``python -m del_plugin.axolotl.sweep CONFIG --sweep SWEEP [axolotl train options]``: Axolotl's sweep (``axolotl
train CONFIG --sweep SWEEP``), arm by arm, with an exit status that says whether every arm trained.

Axolotl's own sweep logs a failed arm and goes on, and exits 0 however many arms failed (``axolotl/cli/main.py``,
``train``): a sweep whose twin never trained looks like one that did. This runs the same arms, written by Axolotl's
own ``generate_config_files`` (the same order, the same ``<output_dir>/sweep000N`` folders), each as ``axolotl
train ARM_CONFIG [options]`` in a process of its own, then prints one line per arm and exits 1 if any failed
(2 for a wrong command line). Options after CONFIG (``--max-steps 2``, ``--launcher python``) go to every arm.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from ..inputs import EXIT_OK, EXIT_RUN_FAILED

__all__ = ["main", "run_arms"]


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m del_plugin.axolotl.sweep",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="exit status: 0 every arm trained, 1 an arm failed, 2 a wrong command line",
    )
    parser.add_argument("config", help="the Axolotl config (examples/smollm2-135m-cpu-offline.yml)")
    parser.add_argument("--sweep", required=True, help="the sweep file (examples/compare-with-mle.yml)")
    return parser


def _arm_command(arm_config: str, options: list[str]) -> list[str]:
    """``axolotl train ARM_CONFIG OPTIONS`` through this interpreter (the ``axolotl`` command's own module)."""
    return [sys.executable, "-m", "axolotl.cli.main", "train", arm_config, *options]


def run_arms(config: str, sweep: str, options: list[str], run=None) -> list[tuple[str, int]]:
    """Train each arm of ``sweep`` over ``config`` in turn (``run`` starts one arm's command and returns what
    :func:`subprocess.run` does); ``(output_dir, exit status)`` per arm, in Axolotl's order."""
    import yaml
    from axolotl.cli.utils.train import generate_config_files

    run = run or subprocess.run
    results = []
    for arm_config, _ in generate_config_files(config, sweep):
        try:
            output_dir = yaml.safe_load(Path(arm_config).read_text(encoding="utf-8")).get("output_dir", "?")
            print(f"del sweep: training {output_dir}", file=sys.stderr, flush=True)
            results.append((str(output_dir), run(_arm_command(arm_config, options)).returncode))
        finally:
            os.unlink(arm_config)  # Axolotl's temporary copy of the arm's config
    return results


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args, options = parser.parse_known_args(argv)
    for path in (args.config, args.sweep):
        if not Path(path).is_file():
            parser.error(f"{path}: no such file")
    results = run_arms(args.config, args.sweep, options)
    if not results:
        parser.error(f"{args.sweep} gives no arm to train")
    failed = [(out, code) for out, code in results if code != 0]
    for out, code in results:
        print(f"{'ok    ' if code == 0 else 'FAILED'} {out}" + (f" (axolotl train exited {code})" if code else ""))
    if failed:
        print(f"del sweep: {len(failed)} of {len(results)} arms failed; their errors are above", file=sys.stderr)
        return EXIT_RUN_FAILED
    return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
