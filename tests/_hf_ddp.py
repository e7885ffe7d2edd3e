"""One process of a two-process ``Trainer`` under torchrun (gloo, CPU), with PlateauCallback: it writes
where it stopped, so the test can check that every process stopped and saved at the same step."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from plateau_tracker.integrations.transformers import PlateauCallback
from tests.test_integration_transformers import RULES, _trainer


def main() -> None:
    url, output = sys.argv[1], Path(sys.argv[2])
    callback = PlateauCallback(
        project="hf-ddp", experiment=output.name, monitor="eval_loss", rules=RULES, url=url
    )
    trainer = _trainer(output, callback, ddp=True)
    trainer.train()
    rank = int(os.environ["RANK"])
    result = {
        "rank": rank,
        "global_step": trainer.state.global_step,
        "stopped": callback.stop_decision is not None,
    }
    (output / f"rank{rank}.json").write_text(json.dumps(result))


if __name__ == "__main__":
    main()
