"""Run: curves of chosen keys with every checkpoint and stop decision marked, and the full history."""

from __future__ import annotations

import pandas as pd
import streamlit as st

from plateau_tracker.dashboard import _api
from plateau_tracker.dashboard._views import best_of, curve_chart, decisions_table, smooth, stop_decision

# The alerts that say the run is not judged as its trainer meant (the tracker makes each once a run, and the
# SDK warns of the same ones), with the words the page leads them with above the curves.
WARNED_ALERTS = {
    "missing_monitor": "Nothing is judged",
    "plan_passed": "The plan no longer holds",
    "late": "Points arrived after their step was judged",
    "companion_late": "A key the rules read arrived after its step was judged",
    "companion_steps": "A key the rules read is logged in another step unit",
    "blind": "Judged late: no learning rate or validation loss is logged",
}

st.title("Run")
# The choice is the run asked for (?run=ID, as the Runs page links) and the newest runs: never every run,
# which at 10,000 runs took seconds to read and made a list nobody scrolls.
NEWEST = 100
recent = _api.guarded(_api.runs_page, limit=NEWEST)["data"]
if not recent:
    st.info("No runs yet.")
    st.stop()
wanted = st.query_params.get("run")
asked = (
    _api.guarded(_api.run_if_any, int(wanted))
    if wanted is not None and wanted.isdigit() and 0 < int(wanted) < 2**62
    else None
)
if wanted is not None and asked is None:
    # Another run shown in its place would be read as the one asked for.
    st.error(f"There is no run {wanted!r} on {_api.tracker_url()}. Choose one below, or open the Runs page.")
listed = ([asked] if asked is not None else []) + [
    r for r in recent if asked is None or r["id"] != asked["id"]
]
labels = {f"#{r['id']} {r['name']} ({r['project']}/{r['experiment']})": r["id"] for r in listed}
chosen_label = st.selectbox(
    f"Run (the newest {NEWEST}; any other by its link on the Runs page)",
    list(labels),
    index=0 if asked is not None or wanted is None else None,
    placeholder="Choose a run",
)
if chosen_label is None:
    st.stop()
run_id = labels[chosen_label]
run = _api.guarded(_api.run, run_id)
decisions = _api.guarded(_api.decisions, run_id)
keys = _api.guarded(_api.keys, run_id)
policy = run.get("policy") or {}
monitor = policy.get("monitor")

stop = stop_decision(decisions)
best_step, best_value = best_of(decisions)
judged = run.get("judged_step")
# One line of figures, not a row of tiles: the curve, with its stop and best step, must open above the fold.
best = "no best yet" if best_step is None else f"best step {best_step} ({best_value:.6g})"
st.caption(
    f"Run #{run['id']} · {run['name']} · {run['project']} / {run['experiment']} · {run['status']} · "
    f"{0 if judged is None else judged + 1} steps judged · {best}"
)
if stop is not None:
    # A stop is the decision the run asked for, not a failure: said plainly, not in an error's red.
    st.info(
        f"Stopped at step {stop['step']} by {stop['rule']}: {stop['reason']}", icon=":material/stop_circle:"
    )
for alert in (d for d in decisions if d["action"] == "alert" and d["rule"] in WARNED_ALERTS):
    st.warning(f"{WARNED_ALERTS[alert['rule']]}: {alert['reason']}")

chart = st.container()  # drawn here, with the controls that shape it below it
chosen = st.multiselect("Metrics", keys, default=[k for k in keys if k == monitor] or keys[:1])
c1, c2 = st.columns(2)
ema = c1.slider("Smoothing (EMA weight of the past)", 0.0, 0.99, 0.0)
log_scale = c2.checkbox("Log scale")
frames = []
for key in chosen:
    points = _api.guarded(_api.series, run_id, key)
    frame = pd.DataFrame(
        {"step": [p["step"] for p in points], "value": [_api.number(p["value"]) for p in points], "key": key}
    )
    frame["value"] = smooth(frame["value"], ema)
    frames.append(frame)
if frames:
    chart.altair_chart(curve_chart(pd.concat(frames), decisions, log_scale=log_scale), width="stretch")
    chart.caption(
        "Dashed rules: red = stop, orange = alert, blue = the best step (the model to keep); green ticks "
        "on the axis: checkpoints (all listed below). Long curves are downsampled by the tracker (min/max "
        "buckets keep every extreme)."
    )

st.subheader("Decisions")
if decisions:
    st.html(decisions_table(decisions))
    for d in decisions:
        if d["rule"] == "plateau" or d["action"] in ("stop", "alert"):
            with st.expander(f"Evidence of {d['action']} at step {d['step']} ({d['rule']})"):
                st.json(d["evidence"])
else:
    st.info("No decision yet.")
