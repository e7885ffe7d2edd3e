"""``plateau completion bash|zsh``: a completion script written from the command's own parser, so it
completes every command, subcommand and option there is, and no other.

    eval "$(plateau completion bash)"     # in ~/.bashrc
    eval "$(plateau completion zsh)"      # in ~/.zshrc (through zsh's bash-completion layer)
"""

from __future__ import annotations

import argparse
import shlex


def _choices(parser: argparse.ArgumentParser) -> tuple[list[str], dict[str, argparse.ArgumentParser]]:
    """The parser's options, and its subcommands by name."""
    options: list[str] = []
    commands: dict[str, argparse.ArgumentParser] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            commands.update(action.choices)
        else:
            options += [flag for flag in action.option_strings if flag.startswith("--")]
    return options, commands


def _table(parser: argparse.ArgumentParser, path: str = "") -> dict[str, list[str]]:
    """What may follow each command path ("" for bare ``plateau``, "db", "db upgrade", ...)."""
    options, commands = _choices(parser)
    table = {path: [*commands, *options]}
    for name, sub in commands.items():
        table.update(_table(sub, f"{path} {name}".strip()))
    return table


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """The completion script for ``shell`` (bash, or zsh through bashcompinit)."""
    cases = "\n".join(
        f"        {shlex.quote(path)}) words={shlex.quote(' '.join(words))} ;;"
        for path, words in sorted(_table(parser).items())
    )
    body = f"""_plateau() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" path="" next word words i
    for ((i = 1; i < COMP_CWORD; i++)); do
        word="${{COMP_WORDS[i]}}"
        [[ "$word" == -* ]] && continue
        next="${{path:+$path }}$word"
        case "$next" in
{_known(parser)}
        esac
    done
    case "$path" in
{cases}
        *) words="" ;;
    esac
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}}
complete -o default -F _plateau plateau
"""
    if shell == "zsh":
        return "autoload -U +X bashcompinit && bashcompinit\n" + body
    return body


def _known(parser: argparse.ArgumentParser) -> str:
    paths = sorted(path for path in _table(parser) if path)
    return "\n".join(f'            {shlex.quote(path)}) path="$next" ;;' for path in paths)
