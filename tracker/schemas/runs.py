"""Runs: create or join, public view, list, finish."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, Field, field_validator

from plateau_tracker.server.policy import PolicySpec
from plateau_tracker.server.schemas._common import Schema, Text, stored_json
from plateau_tracker.server.schemas.decisions import DecisionPublic

RunStatus = Literal["running", "finished", "stopped", "failed", "crashed"]
FinalStatus = Literal["finished", "stopped", "failed", "crashed"]

Name = Annotated[Text, Field(min_length=1, max_length=200)]

MAX_CONFIG_BYTES = 256 * 1024


def _bounded_config(config: dict[str, Any]) -> dict[str, Any]:
    bounded: dict[str, Any] = stored_json(config, max_bytes=MAX_CONFIG_BYTES)
    return bounded


class RunCreate(Schema):
    """Create a run, or join the run that has this ``run_key`` in this project (ranks of one job do)."""

    project: Name
    experiment: Name = "default"
    name: Name | None = None
    run_key: Name | None = None
    config: Annotated[dict[str, Any], AfterValidator(_bounded_config)] = Field(default_factory=dict)
    tags: list[Annotated[Text, Field(max_length=200)]] = Field(default_factory=list, max_length=100)
    policy: PolicySpec | None = None
    world_size: int = Field(default=1, ge=1, le=100_000)
    planned_steps: int | None = Field(
        default=None, ge=1, le=2**62, description="the step the run plans to end at (budget-aware rules)"
    )

    started_at: datetime | None = Field(
        default=None,
        description="when the run started, if before now: `plateau sync` creates a run trained while the "
        "tracker was away with the time its trainer started it (never in the future)",
    )

    @field_validator("policy", mode="before")
    @classmethod
    def _judges_something(cls, value: Any) -> Any:
        # An empty list would judge nothing, silently, where a user who wrote it most likely meant the
        # default (which leaving `rules` out gives). Stored policies are not re-checked: only new runs.
        if isinstance(value, dict) and value.get("rules") == []:
            raise ValueError(
                "rules is an empty list, so nothing would be judged: leave rules out for the default "
                "policy, or name at least one rule"
            )
        return value


class RunFinish(Schema):
    status: FinalStatus = "finished"
    ended_at: datetime | None = Field(
        default=None,
        description="when the run ended, if not now: `plateau sync` replays a finish made while the "
        "tracker was away with the time it was made (never before the run started, nor in the future)",
    )


class RunPublic(Schema):
    id: int
    project: str
    experiment: str
    name: str
    run_key: str
    config: dict[str, Any]
    tags: list[str]
    policy: PolicySpec | None
    status: RunStatus
    world_size: int
    started_at: datetime
    ended_at: datetime | None
    last_heartbeat: datetime
    judged_step: int | None = Field(description="highest step of the monitored metric judged so far")
    stop_step: int | None = Field(description="step at which the policy decided to stop, if it has")
    stop_rule: str | None = Field(default=None, description="the rule behind that stop")
    planned_steps: int | None = None
    summary: dict[str, Any] = Field(
        default_factory=dict, description="figures the trainer reported: model complexity, time per step"
    )
    decision: DecisionPublic
    joined: bool = Field(default=False, description="true when a create joined an existing run")


class RunsPublic(Schema):
    data: list[RunPublic]
    count: int
    next: int | None = Field(
        default=None, description="pass as `before` for the next page (keyset); null on the last page"
    )
