"""What the program sandbox costs per program: ``run_program`` of a paper-like program (a few lines of arithmetic
and a print) without a sandbox (``none``) and in each sandbox that works here, one program at a time. Prints the
median seconds per program of ``--rounds`` rounds of ``--programs`` programs, and each sandbox's ratio to
``none``.

    python bench/program_sandbox.py --programs 20 --rounds 3
"""

from __future__ import annotations

import argparse
import statistics
import time

PROGRAM = "eggs = 16 - 3 - 4\nprice = 2\nprint(eggs * price)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--programs", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args(argv)

    from del_plugin.evaluation.benchmarks import program
    from del_plugin.evaluation.benchmarks.program.choice import sandbox_problem

    modes = [program.UNSANDBOXED]
    for mode in program.SANDBOXES:
        problem = sandbox_problem(mode)
        if problem:
            print(f"{mode}: not measured ({problem})")
        else:
            modes.append(mode)
    seconds = {}
    for mode in modes:
        rounds = []
        for _ in range(args.rounds):
            started = time.perf_counter()
            for _ in range(args.programs):
                run = program.run_program(PROGRAM, sandbox=mode)
                assert run.stdout == "18\n", run
            rounds.append((time.perf_counter() - started) / args.programs)
        seconds[mode] = statistics.median(rounds)
    print("| isolation | s per program | ratio to none |")
    print("|---|---|---|")
    for mode in modes:
        print(f"| {mode} | {seconds[mode]:.4f} | {seconds[mode] / seconds[program.UNSANDBOXED]:.2f} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
