"""A training loop for the kill tests: logs ``loss`` and ``m`` at every step as fast as it can (with a
short pause every 100 steps: ~600 steps/s, a real loop's cadence), and appends ``step monotonic-time``
to a progress file every 100 steps, flushed, so the test knows when each step's ``log()`` returned.

    python -m tests._kill_trainer URL PROJECT PROGRESS_FILE [PAUSE_S]
"""

from __future__ import annotations

import sys
import time

import plateau_tracker as plateau


def main() -> None:
    url, project, progress_path = sys.argv[1:4]
    pause = float(sys.argv[4]) if len(sys.argv) > 4 else 0.15
    run = plateau.init(project=project, url=url, run_key=f"{project}-run", wait=1.0)
    with open(progress_path, "w") as progress:
        step = 0
        while True:
            run.log({"loss": 1.0 / (step + 1), "m": float(step)}, step=step)
            if step % 100 == 99:
                progress.write(f"{step} {time.monotonic()}\n")
                progress.flush()
                time.sleep(pause)
            step += 1


if __name__ == "__main__":
    main()
