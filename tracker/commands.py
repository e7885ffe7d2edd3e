"""What each ``plateau`` command does (the parser in ``tracker.cli`` routes to these). Imports are made
inside each command: ``plateau sync`` runs on a slim install, with the SDK's dependencies alone."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from plateau_tracker.server.json_output import print_json

if TYPE_CHECKING:
    from plateau_tracker.server.config import Settings


def settings_of(args: argparse.Namespace) -> Settings:
    """The server settings a command runs with: the environment's, with its --home, --database-url, --host
    and --port over them."""
    from plateau_tracker.server.config import Settings

    overrides = {
        name: getattr(args, name)
        for name in ("home", "database_url", "host", "port")
        if getattr(args, name, None) is not None
    }
    return Settings(**overrides)


def serve_command(args: argparse.Namespace) -> int:
    from plateau_tracker.server.db.engine import Database
    from plateau_tracker.server.db.prepare import prepare_schema
    from plateau_tracker.server.serve import serve
    from plateau_tracker.server.services.auth import any_tokens, is_loopback

    settings = settings_of(args)
    # Before any worker starts: a database that cannot be used is one line here, not a traceback per
    # worker; an empty PostgreSQL database is upgraded as SQLite is (unless --no-upgrade).
    if prepare_schema(settings.resolved_database_url(), upgrade_empty=not args.no_upgrade):
        print("plateau serve: the empty PostgreSQL database now has the tracker's schema", flush=True)
    if not is_loopback(settings.host) and not args.insecure:
        database = Database(settings.resolved_database_url())
        try:
            protected = any_tokens(database)
        finally:
            database.dispose()
        if not protected:
            print(
                f"plateau serve: refusing to listen on {settings.host} with no API token configured "
                "(anyone who can reach it could read and write every run). Create one with "
                "`plateau token create --project P --scope write`, or pass --insecure.",
                file=sys.stderr,
            )
            return 1
    if settings.is_sqlite() and args.workers > 1:
        print(
            "plateau serve: SQLite has one writer at a time; several workers only queue on its lock "
            "(use PostgreSQL with PLATEAU_DATABASE_URL to scale out)",
            file=sys.stderr,
        )
    from plateau_tracker.server.serve import PortUnavailableError

    def announce(url: str) -> None:
        print(
            f"plateau tracker on {url} "
            f"(database {settings.resolved_database_url()}, {args.workers} worker(s))",
            flush=True,
        )

    try:
        serve(settings, workers=args.workers, log_level=args.log_level, on_listening=announce)
    except PortUnavailableError as exc:
        print(
            f"plateau serve: {exc.strerror}; is a tracker already running there? "
            "Choose another with --port (or PLATEAU_PORT)",
            file=sys.stderr,
        )
        return 1
    return 0


def token_command(args: argparse.Namespace) -> int:
    from plateau_tracker.server.db.engine import Database
    from plateau_tracker.server.db.prepare import prepare_schema
    from plateau_tracker.server.errors import NotFoundError
    from plateau_tracker.server.services import auth

    url = settings_of(args).resolved_database_url()
    prepare_schema(url)
    database = Database(url)
    try:
        if args.token_command == "create":
            if (args.scope == "operator") == (args.project is not None):
                print(
                    "plateau token create: give --project for a read or write token, and none for an "
                    "operator token (it reads every project)",
                    file=sys.stderr,
                )
                return 2
            token_id, token = auth.create_token(database, args.project, args.scope, args.name or "")
            if args.json:
                print_json({"id": token_id, "project": args.project, "scope": args.scope, "token": token})
                return 0
            opens = "every project, read only" if args.project is None else f"project {args.project!r}"
            print(f"token {token_id} ({args.scope}, {opens}); shown once, keep it secret:")
            print(token)
        elif args.token_command == "list":
            tokens = auth.list_tokens(database, args.project)
            if args.json:
                operator = [{**row, "project": None} if row["scope"] == "operator" else row for row in tokens]
                print_json({"tokens": operator})
                return 0
            for row in tokens:
                state = "revoked" if row["revoked"] else "active"
                fields = [
                    f"{row['id']:>5}",
                    str(row["project"]),
                    f"{row['scope']:8}",
                    f"{row['prefix']}...",
                    state,
                ]
                print("  ".join([*fields, str(row["name"])]))
        else:
            try:
                auth.revoke_token(database, args.id)
            except NotFoundError as exc:
                print(f"plateau token revoke: {exc}", file=sys.stderr)
                return 1
            if args.json:
                print_json({"id": args.id, "revoked": True})
            else:
                print(f"token {args.id} revoked")
    finally:
        database.dispose()
    return 0


def db_command(args: argparse.Namespace) -> int:
    from plateau_tracker.server.db import migrate
    from plateau_tracker.server.db.engine import make_engine

    url = settings_of(args).resolved_database_url()
    if args.db_command == "upgrade":
        migrate.upgrade(url, args.revision)
    elif args.db_command == "downgrade":
        migrate.downgrade(url, args.revision)
    engine = make_engine(url)
    try:
        revision, head = migrate.current_revision(engine), migrate.head_revision(url)
        if args.json:
            print_json({"revision": revision, "head": head, "current": revision == head})
        else:
            print(f"database at revision {revision} (head {head})")
    finally:
        engine.dispose()
    return 0


def demo_command(args: argparse.Namespace) -> int:
    from plateau_tracker.server.demo import run_demo

    return run_demo(
        settings_of(args),
        url=args.url,
        epochs=args.epochs,
        seed=args.seed,
        policy=args.policy,
        as_json=args.json,
    )


def replay_command(args: argparse.Namespace) -> int:
    from plateau_tracker.server.replay.command import run_replay

    return run_replay(args)


def dashboard_command(args: argparse.Namespace) -> int:
    import importlib.util

    from plateau_tracker.server.discovery import port_is_free, tracker_for, wait_for_http
    from plateau_tracker.server.processes import start_child, stop_child

    if importlib.util.find_spec("streamlit") is None:
        print(
            "plateau dashboard needs the dashboard extra: pip install 'plateau-tracker[dashboard]'",
            file=sys.stderr,
        )
        return 1
    from plateau_tracker.server.services.auth import is_loopback

    sign_in = args.dashboard_token or os.environ.get("PLATEAU_DASHBOARD_TOKEN")
    if not is_loopback(args.dashboard_host) and not sign_in:
        print(
            f"plateau dashboard: refusing to listen on {args.dashboard_host} without a sign-in token: anyone "
            "who reaches that address would see every run the tracker token can read. Set "
            "PLATEAU_DASHBOARD_TOKEN (or --dashboard-token), and put it behind a TLS reverse proxy "
            "(README: Sharing the dashboard)",
            file=sys.stderr,
        )
        return 2
    settings = settings_of(args)
    # The package, wherever it is installed (a wheel, or a checkout installed with -e).
    from plateau_tracker.dashboard.launch import streamlit_command

    with tracker_for(settings, args.url) as url:
        command = streamlit_command(args.dashboard_port, args.dashboard_host)
        if not port_is_free(args.dashboard_host, args.dashboard_port):
            print(
                f"plateau dashboard: {args.dashboard_host}:{args.dashboard_port} is in use; is a dashboard "
                "already running there? Choose another with --port",
                file=sys.stderr,
            )
            return 1
        env = {**os.environ, "PLATEAU_URL": url}
        if sign_in:
            env["PLATEAU_DASHBOARD_TOKEN"] = sign_in
        streamlit = start_child(command, env=env)
        address = f"http://{args.dashboard_host}:{args.dashboard_port}"
        try:
            if wait_for_http(f"{address}/_stcore/health", streamlit, timeout=60.0):
                print(f"plateau dashboard on {address} (tracker {url})", flush=True)
            return streamlit.wait()
        except KeyboardInterrupt:
            return 0
        finally:
            stop_child(streamlit)


def _rehoming(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """``--policy KEY=SPEC``, ``--mode KEY=MODE`` and ``--experiment KEY=NAME`` as replacements of spooled
    create-body fields."""
    from plateau_tracker._spool import spooled_runs

    spooled = spooled_runs(Path(args.spool) if args.spool else None)
    changes: dict[str, dict[str, Any]] = {}
    modes: dict[str, str] = {}
    specs: dict[str, str] = {}  # the last --policy given for each run
    options = (
        ("--experiment", args.experiment or []),
        ("--mode", args.mode or []),
        ("--policy", args.policy or []),
    )
    for option, pairs in options:
        for pair in pairs:
            key, sep, value = pair.partition("=")
            if not sep or not key or not value:
                raise ValueError(f"{option} takes RUN_KEY=VALUE, got {pair!r}")
            if key not in spooled:
                raise ValueError(f"no run {key!r} in the spool (spooled: {', '.join(spooled) or 'none'})")
            if option == "--experiment":
                changes.setdefault(key, {})["experiment"] = value
            elif option == "--mode":
                if value not in ("min", "max"):
                    raise ValueError(f"--mode takes RUN_KEY=min or RUN_KEY=max, got {pair!r}")
                modes[key] = value
            else:
                specs[key] = value
    for key in {*modes, *specs}:
        create = json.loads((spooled[key] / "run.json").read_text())["create"]
        changes.setdefault(key, {})["policy"] = _corrected_policy(
            key, create.get("policy") or {}, specs.get(key), modes.get(key)
        )
    return changes


def _corrected_policy(key: str, old: dict[str, Any], spec: str | None, mode: str | None) -> dict[str, Any]:
    """The policy a spooled run is sent again with: ``spec`` (a preset or a file; else its own rules) on its
    monitor, in ``mode`` or else its own, which must not contradict what the monitor's name says: a
    ``val/loss`` maximised keeps its worst value, and nothing else would say so."""
    from plateau_tracker._mode import infer_mode

    monitor = old.get("monitor", "val/loss")
    said = infer_mode(monitor)
    own = old.get("mode") if old.get("mode") in ("min", "max") else (said or "min")
    if mode is None and spec is not None and said is not None and said != own:
        raise ValueError(
            f"run {key!r} watches {monitor!r} in mode {own!r}, but its name says {said!r}: give "
            f"--mode {key}={said} to correct it, or --mode {key}={own} to keep it"
        )
    mode = mode or own
    if spec is None:
        return {**old, "monitor": monitor, "mode": mode}
    try:
        from plateau_tracker.server.replay.command import load_policy
    except ImportError as exc:
        raise ValueError(
            f"--policy reads presets and policy files with the tracker's code ({exc.name} is "
            "missing): pip install 'plateau-tracker[server]'"
        ) from None
    policy = load_policy(spec, monitor=monitor, mode=mode)  # type: ignore[arg-type]
    kept: dict[str, Any] = {name: old[name] for name in ("combine", "reduce") if name in old}
    return {**policy.model_dump(mode="json"), **kept}


def sync_command(args: argparse.Namespace) -> int:
    import plateau_tracker as plateau

    try:
        rehome = _rehoming(args)
        report = plateau.sync(
            Path(args.spool) if args.spool else None,
            url=args.url or os.environ.get("PLATEAU_URL"),
            drop=set(args.drop or []),
            rehome=rehome,
        )
    except ValueError as exc:
        print(f"plateau sync: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print_json(report)
        return 0 if report.left == 0 else 1
    dropped = f"; {report.dropped} runs dropped unsent" if report.dropped else ""
    print(
        f"plateau sync: {report.points} points in {report.batches} batches of {report.runs} runs sent "
        f"({report.finished} runs ended as their trainer finished them); {report.rejected} points "
        f"rejected; {report.left} batches left in the spool{dropped}"
    )
    for error in report.errors[:20]:
        print(f"  {error}", file=sys.stderr)
    if len(report.errors) > 20:
        print(f"  ... and {len(report.errors) - 20} more", file=sys.stderr)
    return 0 if report.left == 0 else 1


def _tracker_url(args: argparse.Namespace) -> contextlib.AbstractContextManager[str]:
    """The tracker at --url or $PLATEAU_URL, else the configured one, started on the embedded default
    if none runs."""
    from plateau_tracker.server.discovery import tracker_for

    return tracker_for(settings_of(args), args.url or os.environ.get("PLATEAU_URL"))


def _needs_tensorboard(command: str) -> bool:
    import importlib.util

    if importlib.util.find_spec("tensorboard") is None:
        print(
            f"plateau {command} tensorboard needs the tensorboard package: "
            "pip install 'plateau-tracker[tensorboard]'",
            file=sys.stderr,
        )
        return True
    return False


def export_command(args: argparse.Namespace) -> int:
    if _needs_tensorboard("export"):
        return 1
    from plateau_tracker.server.tb import export_runs

    token = args.token or os.environ.get("PLATEAU_TOKEN")
    with _tracker_url(args) as url:
        report = export_runs(
            url,
            Path(args.logdir),
            run_ids=args.run,
            experiment=args.experiment,
            project=args.project,
            token=token,
        )
    if args.json:
        print_json({"runs": report.runs, "points": report.points, "logdir": args.logdir})
        return 0 if report.runs else 1
    for run in report.runs:
        print(
            f"run {run.run_id}: {run.points} points in {run.series} series, {run.decisions} decisions "
            f"-> {run.directory}"
        )
    if not report.runs:
        where = f" of project {args.project!r}" if args.project else ""
        print(f"plateau export: experiment {args.experiment!r}{where} has no runs", file=sys.stderr)
        return 1
    print(
        f"plateau export: {len(report.runs)} runs, {report.points} points; tensorboard --logdir {args.logdir}"
    )
    return 0


def import_command(args: argparse.Namespace) -> int:
    if _needs_tensorboard("import"):
        return 1
    from plateau_tracker.server.tb import import_logdir

    logdir = Path(args.logdir)
    if not logdir.is_dir():
        print(f"plateau import: {logdir} is not a folder", file=sys.stderr)
        return 1
    token = args.token or os.environ.get("PLATEAU_TOKEN")
    with _tracker_url(args) as url:
        report = import_logdir(logdir, url, experiment=args.experiment, project=args.project, token=token)
    if args.json:
        print_json({"runs": report.runs, "points": report.points})
        return 0 if report.runs else 1
    for run in report.runs:
        print(
            f"{run.directory} -> run {run.run_id} ({run.name}): {run.points} points in {run.series} series, "
            f"{run.accepted} new; {run.skipped_values} non-scalar values skipped"
        )
    print(f"plateau import: {len(report.runs)} runs, {report.points} points")
    return 0 if report.runs else 1


def delete_command(args: argparse.Namespace) -> int:
    """``plateau delete run ID...`` or ``plateau delete experiment NAME``: ask on a terminal, else need
    ``--yes``; one line per deletion."""
    from plateau_tracker.client import NotFoundError, connect

    if args.delete_kind == "run":
        what = f"run{'s' if len(args.run_ids) > 1 else ''} {', '.join(map(str, args.run_ids))}"
    else:
        what = f"experiment {args.experiment!r} of project {args.project!r} and every run in it"
    if not args.yes:
        if not sys.stdin.isatty():
            print(
                f"plateau delete: deleting {what} needs --yes when not asked on a terminal", file=sys.stderr
            )
            return 1
        answer = input(f"Delete {what}, with their points and decisions? This cannot be undone. [y/N] ")
        if answer.strip().lower() not in ("y", "yes"):
            print("plateau delete: nothing deleted", file=sys.stderr)
            return 1
    failed = 0
    deletions: list[dict[str, Any]] = []
    with connect(args.url, token=args.token) as client:
        if args.delete_kind == "experiment":
            label = f"experiment {args.experiment!r} of project {args.project!r}"
            targets: list[tuple[str, Any]] = [
                (label, lambda: client.delete_experiment(args.project, args.experiment))
            ]
        else:
            targets = [
                (f"run {run_id}", lambda run_id=run_id: client.delete_run(run_id)) for run_id in args.run_ids
            ]
        for label, call in targets:
            try:
                deleted = call()
            except NotFoundError:
                print(f"plateau delete: {label} does not exist at {client.url}", file=sys.stderr)
                failed += 1
                continue
            deletions.append({"deleted": label, **deleted})
            if not args.json:
                print(
                    f"deleted {label}: {deleted['runs']} run(s), {deleted['points']} points, "
                    f"{deleted['deliveries']} webhook deliveries"
                )
    if args.json:
        print_json({"deletions": deletions, "not_found": failed})
    return 1 if failed else 0
