"""The ``plateau`` command: its parser and ``main``. What each command does is in ``tracker.commands``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from plateau_tracker.server import commands

# Commands that need the SDK alone; the others need the tracker's dependencies (the `server` extra).
_SLIM_COMMANDS = frozenset({"sync", "completion", "runs", "decisions"})


def _add_store_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--home", type=Path, help="data folder (PLATEAU_HOME, default ~/.plateau)")
    parser.add_argument(
        "--database-url", help="SQLAlchemy URL (PLATEAU_DATABASE_URL, default SQLite in --home)"
    )


def _add_json(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--json", action="store_true", help="print what the command reports as one JSON document on stdout"
    )


def _add_remote_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--url", help="tracker URL (PLATEAU_URL, default http://127.0.0.1:8765)")
    parser.add_argument("--token", help="API token (PLATEAU_TOKEN)")


def build_parser() -> argparse.ArgumentParser:
    from plateau_tracker.server import __version__

    parser = argparse.ArgumentParser(prog="plateau", description="Plateau: know when training has converged.")
    parser.add_argument("--version", action="version", version=f"plateau {__version__}")
    subcommands = parser.add_subparsers(dest="command", required=True)
    _add_serve(subcommands)
    _add_db(subcommands)
    _add_token(subcommands)
    _add_demo(subcommands)
    _add_dashboard(subcommands)
    _add_replay(subcommands)
    _add_export_import(subcommands)
    _add_sync(subcommands)
    _add_listing(subcommands)
    _add_delete(subcommands)
    completion = subcommands.add_parser(
        "completion",
        help="print a shell completion script",
        description='Completion of commands and options: eval "$(plateau completion bash)" in ~/.bashrc, '
        'or eval "$(plateau completion zsh)" in ~/.zshrc.',
    )
    completion.add_argument("shell", choices=["bash", "zsh"], help="the shell to complete in")
    completion.set_defaults(handler=lambda args: _print_completion(parser, args.shell))
    return parser


def _print_completion(parser: argparse.ArgumentParser, shell: str) -> int:
    from plateau_tracker.server.completion import script

    print(script(parser, shell), end="")
    return 0


def _add_serve(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``plateau serve``."""
    serve = subcommands.add_parser("serve", help="run the tracker server")
    _add_store_options(serve)
    serve.add_argument("--host", help="address to bind (PLATEAU_HOST, default 127.0.0.1)")
    serve.add_argument("--port", type=int, help="port (PLATEAU_PORT, default 8765)")
    serve.add_argument("--workers", type=int, default=1, help="uvicorn worker processes")
    serve.add_argument(
        "--log-level",
        default="warning",
        choices=["critical", "error", "warning", "info", "debug", "trace"],
        help="uvicorn's log level (default warning: errors and warnings only)",
    )
    serve.add_argument(
        "--insecure", action="store_true", help="allow a non-loopback address with no API token configured"
    )
    serve.add_argument(
        "--no-upgrade",
        action="store_true",
        help="leave an empty PostgreSQL database empty (by default serve creates the schema in it)",
    )
    serve.set_defaults(handler=commands.serve_command)


def _add_db(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``plateau db upgrade|downgrade|current``."""
    db = subcommands.add_parser(
        "db",
        help="database schema migrations",
        description="Alembic migrations of the tracker's database "
        "(the tracker applies them itself on start).",
    )
    db_commands = db.add_subparsers(dest="db_command", required=True)
    db_help = {
        "upgrade": "migrate to a revision (default head, the newest)",
        "downgrade": "migrate back to a revision",
        "current": "print the database's revision and the newest one",
    }
    for name, default in (("upgrade", "head"), ("downgrade", None), ("current", None)):
        sub = db_commands.add_parser(name, help=db_help[name], description=db_help[name])
        _add_store_options(sub)
        _add_json(sub)
        if name != "current":
            sub.add_argument(
                "revision",
                nargs=None if default is None else "?",
                default=default,
                help="an Alembic revision id, or head / base / -1",
            )
    db.set_defaults(handler=commands.db_command)


def _add_token(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``plateau token create|list|revoke``."""
    token = subcommands.add_parser(
        "token",
        help="API tokens: per project, or an operator's",
        description="API tokens, each for one project with scope read or write, or an operator token that "
        "reads every project (scope operator, no --project). A tracker that has any "
        "token requires one on every request (Authorization: Bearer ...); the SDK and commands take "
        "$PLATEAU_TOKEN.",
    )
    token_commands = token.add_subparsers(dest="token_command", required=True)
    create = token_commands.add_parser(
        "create", help="create a token (printed once)", description="Create a token; it is printed once."
    )
    create.add_argument("--project", help="the project the token opens (not for --scope operator)")
    create.add_argument(
        "--scope",
        choices=["read", "write", "operator"],
        required=True,
        help="read: see the project's runs; write: also log and create; operator: see every project's "
        "runs (a team's dashboard), write none",
    )
    create.add_argument("--name", help="a label to tell tokens apart in `plateau token list`")
    listing = token_commands.add_parser(
        "list", help="list tokens (never their secret)", description="List tokens, never their secret."
    )
    listing.add_argument("--project", help="only this project's tokens")
    revoke = token_commands.add_parser(
        "revoke", help="revoke a token", description="Revoke a token: it is refused from now on."
    )
    revoke.add_argument("id", type=int, help="the token's id, as `plateau token list` shows it")
    for sub in (create, listing, revoke):
        _add_store_options(sub)
        _add_json(sub)
    token.set_defaults(handler=commands.token_command)


def _add_demo(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``plateau demo``."""
    demo = subcommands.add_parser(
        "demo",
        help="train small models on digits, stopped by Plateau",
        description="Train four small PyTorch models on scikit-learn's digits under Plateau's default "
        "decisions (checkpoint at each new best, stop), then print what was decided. Starts a tracker on "
        "the configured store unless one runs there.",
    )
    _add_store_options(demo)
    demo.add_argument("--url", help="use this running tracker instead of starting one")
    demo.add_argument("--port", type=int, help="port for the tracker the demo starts")
    demo.add_argument("--epochs", type=int, default=60, help="epoch budget of each run")
    demo.add_argument("--seed", type=int, default=0, help="seed of the data split and the models")
    demo.add_argument(
        "--policy",
        type=_demo_policy,
        default="default",
        help="the runs' stopping policy: default (Plateau's default policy) or patience-K (e.g. patience-5)",
    )
    _add_json(demo)
    demo.set_defaults(handler=commands.demo_command)


def _demo_policy(value: str) -> str:
    """``--policy``'s value, checked before any model trains."""
    from plateau_tracker.server.demo import policy_rules

    try:
        policy_rules(value)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    return value


def _add_dashboard(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``plateau dashboard``."""
    dashboard = subcommands.add_parser(
        "dashboard",
        help="the Streamlit dashboard (starts a tracker if none runs)",
        description="The Streamlit dashboard: runs with their decisions, curves, comparison, distributed "
        "health, complexity. Starts a tracker on the configured store unless one runs there; Ctrl-C, "
        "SIGTERM or SIGHUP stop both.",
    )
    _add_store_options(dashboard)
    dashboard.add_argument(
        "--url", help="a running tracker to show (default: the configured one, started if away)"
    )
    dashboard.add_argument(
        "--port",
        "--dashboard-port",
        dest="dashboard_port",
        type=int,
        default=8501,
        help="port the dashboard listens on (default 8501)",
    )
    dashboard.add_argument(
        "--host",
        "--dashboard-host",
        dest="dashboard_host",
        default="127.0.0.1",
        help="address the dashboard listens on (default 127.0.0.1)",
    )
    dashboard.add_argument(
        "--tracker-port",
        dest="port",
        type=int,
        help="port of the tracker it starts when none runs (PLATEAU_PORT, default 8765)",
    )
    dashboard.add_argument(
        "--dashboard-token",
        help="the token viewers sign in with (PLATEAU_DASHBOARD_TOKEN); required on a non-loopback --host",
    )
    dashboard.set_defaults(handler=commands.dashboard_command)


def _add_replay(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``plateau replay``."""
    replay = subcommands.add_parser("replay", help="apply a stopping policy to recorded curves")
    replay.add_argument(
        "policy", help="a JSON or YAML policy file, or a preset: default, default-sweep, median, patience-K"
    )
    replay.add_argument("--curves", nargs="*", help="JSON-lines curve files (OPDA schema)")
    replay.add_argument("--url", help="tracker for --experiment (PLATEAU_URL, default http://127.0.0.1:8765)")
    replay.add_argument("--token", help="API token for --experiment (PLATEAU_TOKEN)")
    replay.add_argument("--experiment", help="replay this experiment's stored runs from the tracker")
    replay.add_argument("--project", help="project of --experiment")
    replay.add_argument("--metric", default="val", help="the metric the policy watches")
    replay.add_argument("--score", help="the metric regret is scored on (default: --metric)")
    replay.add_argument(
        "--mode",
        choices=["min", "max"],
        help="the direction the metric improves in: min for a loss, max for an accuracy (default: the curve "
        "file's own \"mode\", else what --metric's name says, val_loss min, val_acc max, else max)",
    )
    replay.add_argument("--sweep", action="store_true", help="replay each source as a sweep in arrival order")
    replay.add_argument("--source", action="append", help="only these sources")
    replay.add_argument(
        "--include-incomplete",
        action="store_true",
        help="also score runs whose curve stops before its budget (diverged)",
    )
    _add_json(replay)
    replay.set_defaults(handler=commands.replay_command)


def _add_export_import(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``plateau export tensorboard`` and ``plateau import tensorboard``."""
    export = subcommands.add_parser("export", help="export stored runs to another tool's format")
    export_formats = export.add_subparsers(dest="export_format", required=True)
    tb_export = export_formats.add_parser(
        "tensorboard", help="event files, one folder per run: scalars, decisions as text, HParams"
    )
    chosen = tb_export.add_mutually_exclusive_group(required=True)
    chosen.add_argument("--run", type=int, action="append", help="a run id (repeat for several)")
    chosen.add_argument("--experiment", help="every run of this experiment")
    tb_export.add_argument("--project", help="project of --experiment")
    tb_export.add_argument("--logdir", required=True, help="TensorBoard log folder to write into")
    importing = subcommands.add_parser("import", help="import runs from another tool's files")
    import_formats = importing.add_subparsers(dest="import_format", required=True)
    tb_import = import_formats.add_parser(
        "tensorboard", help="scalar series of event files, one run per event-file folder"
    )
    tb_import.add_argument("logdir", help="a TensorBoard log folder")
    tb_import.add_argument("--experiment", required=True, help="experiment to import the runs into")
    tb_import.add_argument("--project", default="default", help="project of --experiment (default: default)")
    for sub in (tb_export, tb_import):
        _add_store_options(sub)
        sub.add_argument(
            "--url", help="tracker URL (PLATEAU_URL; default: the configured one, started if away)"
        )
        sub.add_argument("--token", help="API token (PLATEAU_TOKEN)")
        _add_json(sub)
    tb_export.set_defaults(handler=commands.export_command)
    tb_import.set_defaults(handler=commands.import_command)


def _add_sync(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``plateau sync``."""
    sync = subcommands.add_parser(
        "sync",
        help="send the SDK's spooled points to the tracker",
        description="Send what the SDK spooled while the tracker was away: each run is created or joined "
        "by its run key, its points sent in order, then its summary and its finish (status and time). A "
        "run the tracker refuses stays in the spool until corrected (--policy, --experiment) or dropped.",
    )
    sync.add_argument("--spool", help="spool folder (default $PLATEAU_HOME/spool)")
    sync.add_argument(
        "--url", help="tracker URL (default: $PLATEAU_URL, else the one each run was logging to)"
    )
    sync.add_argument(
        "--drop", action="append", metavar="RUN_KEY", help="delete this run's spool unsent (repeatable)"
    )
    sync.add_argument(
        "--policy",
        action="append",
        metavar="RUN_KEY=POLICY",
        help="send this run with another policy: a preset (default, patience-K, ...) or a JSON/YAML file; "
        "its monitor and mode are kept (refused when the mode contradicts the monitor's name: give --mode)",
    )
    sync.add_argument(
        "--mode",
        action="append",
        metavar="RUN_KEY=min|max",
        help="send this run with its policy's mode set: which way its monitored metric improves",
    )
    sync.add_argument(
        "--experiment", action="append", metavar="RUN_KEY=NAME", help="send this run into another experiment"
    )
    _add_json(sync)
    sync.set_defaults(handler=commands.sync_command)


def _add_listing(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``plateau runs`` and ``plateau decisions``."""
    from plateau_tracker.server import listing

    runs = subcommands.add_parser(
        "runs",
        help="list runs, newest first, with their status and decision",
        description="The tracker's runs at --url ($PLATEAU_URL), newest first: status, judged step of the "
        "plan, and the stop or the best step. Filters combine; --tag repeated means every tag.",
    )
    runs.add_argument("--project", help="only this project's runs")
    runs.add_argument("--experiment", help="only this experiment's runs")
    runs.add_argument(
        "--status",
        action="append",
        choices=["running", "finished", "stopped", "failed", "crashed"],
        help="only runs in this status (repeat for several)",
    )
    runs.add_argument("--tag", action="append", help="only runs holding this tag (repeat: all of them)")
    runs.add_argument("--name", help="only runs of this name")
    runs.add_argument("--limit", type=int, default=50, help="how many runs at most (default 50)")
    decisions = subcommands.add_parser(
        "decisions",
        help="a run's decisions, oldest first, with their reasons",
        description="Every decision the tracker at --url ($PLATEAU_URL) made about a run: step, action, "
        "rule, best step and reason (--json adds each decision's evidence).",
    )
    decisions.add_argument("run_id", type=int, metavar="RUN_ID", help="the run's id, as `plateau runs` shows")
    for sub in (runs, decisions):
        _add_remote_options(sub)
        _add_json(sub)
    runs.set_defaults(handler=listing.runs_command)
    decisions.set_defaults(handler=listing.decisions_command)


def _add_delete(subcommands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """``plateau delete run`` and ``plateau delete experiment``."""
    delete = subcommands.add_parser(
        "delete",
        help="delete runs or an experiment, with their points, decisions and webhook deliveries",
        description="Delete from the tracker at --url ($PLATEAU_URL). It asks first on a terminal; "
        "elsewhere it needs --yes.",
    )
    kinds = delete.add_subparsers(dest="delete_kind", required=True)
    runs = kinds.add_parser("run", help="delete runs by id")
    runs.add_argument("run_ids", type=int, nargs="+", metavar="RUN_ID", help="the ids of the runs to delete")
    experiment = kinds.add_parser("experiment", help="delete an experiment and every run in it")
    experiment.add_argument("experiment", help="the experiment's name")
    experiment.add_argument(
        "--project", default="default", help="the experiment's project (default: default)"
    )
    for sub in (runs, experiment):
        _add_remote_options(sub)
        _add_json(sub)
        sub.add_argument("--yes", "-y", action="store_true", help="delete without asking")
        sub.set_defaults(handler=commands.delete_command)


def _one_line(exc: BaseException) -> str:
    """What went wrong with the tracker, in one line a user can act on."""
    from plateau_tracker.client import TrackerError

    if isinstance(exc, TrackerError):
        if exc.status is None:
            return f"cannot reach the tracker at {exc.url} ({exc})"
        return f"the tracker at {exc.url} answered {exc}"
    return str(exc)


def _missing_server(command: str) -> str | None:
    """One line saying which extra to install, when ``command`` needs what a slim install lacks."""
    if command in _SLIM_COMMANDS:
        return None
    try:
        import httpx  # noqa: F401 - only whether it imports

        import plateau_tracker.server.config
        import plateau_tracker.server.db.engine  # noqa: F401
    except ImportError as exc:
        return (
            f"plateau {command} needs the tracker's dependencies ({exc.name} is missing): "
            "pip install 'plateau-tracker[server]'"
        )
    return None


def main(argv: Sequence[str] | None = None) -> int:
    """Run one ``plateau`` command; returns its exit code. Errors of the network, of the tracker and of
    the user's input are one line on stderr and exit code 1, never a traceback."""
    from plateau_tracker.server.processes import exit_on_signals

    parser = build_parser()
    arguments = sys.argv[1:] if argv is None else list(argv)
    if not arguments:  # bare `plateau`: what it can do, as `git` and `docker` answer
        parser.print_help()
        return 0
    args = parser.parse_args(arguments)
    missing = _missing_server(args.command)
    if missing is not None:
        print(missing, file=sys.stderr)
        return 1
    from plateau_tracker.client import TrackerError

    remote_errors: tuple[type[Exception], ...] = (TrackerError,)
    try:
        from plateau_tracker.server.db.prepare import DatabaseUnavailableError, SchemaOutOfDateError
        from plateau_tracker.server.discovery import TrackerUnavailableError

        remote_errors += (TrackerUnavailableError, DatabaseUnavailableError, SchemaOutOfDateError)
    except ImportError:  # a slim install runs `sync` alone, which needs no tracker code
        pass
    database_errors = _database_errors()
    try:
        with exit_on_signals():  # SIGTERM/SIGHUP unwind like Ctrl-C: the children a command started stop
            result: int = args.handler(args)
            return result
    except KeyboardInterrupt:
        return 130
    except remote_errors as exc:
        print(f"plateau {args.command}: {_one_line(exc)}", file=sys.stderr)
        return 1
    except database_errors as exc:  # a command that opens the store itself (db, token)
        from plateau_tracker.server.db.prepare import explain

        url = commands.settings_of(args).resolved_database_url()
        print(f"plateau {args.command}: {explain(exc, url)}", file=sys.stderr)
        return 1


def _database_errors() -> tuple[type[Exception], ...]:
    """The store's errors a command explains in one line (none on a slim install without SQLAlchemy)."""
    try:
        from sqlalchemy.exc import ArgumentError, NoSuchModuleError, OperationalError
    except ImportError:
        return ()
    return (OperationalError, NoSuchModuleError, ArgumentError)


if __name__ == "__main__":
    sys.exit(main())
