"""Shell completion scripts generated from the `replog` argparse tree.

`replog completion bash` prints a bash script (bash >= 4: associative arrays) that knows,
for every command path (`"replog"`, `"replog topic"`, `"replog topic describe"`, ...),
its subcommands (and the choices of a positional argument, e.g. `completion bash|zsh`), its
option strings and the choices of options that have them (or the `completions` an option
offers while taking any value, e.g. `consume --format`); options that take a free value
complete file names. `replog completion zsh` prints the same script behind zsh's
`bashcompinit`, so both shells share one implementation.
"""

from __future__ import annotations

import argparse
import shlex

_FUNCTION = r"""
_replog() {
    local cur prev path w i
    cur="${COMP_WORDS[COMP_CWORD]}"
    prev=""
    (( COMP_CWORD > 0 )) && prev="${COMP_WORDS[COMP_CWORD-1]}"
    path="replog"
    for (( i = 1; i < COMP_CWORD; i++ )); do
        w="${COMP_WORDS[i]}"
        if [[ " ${_replog_commands[$path]} " == *" $w "* ]]; then
            path="$path $w"
        fi
    done
    if [[ -n "${_replog_choices["$path $prev"]+set}" ]]; then
        COMPREPLY=( $(compgen -W "${_replog_choices["$path $prev"]}" -- "$cur") )
        return 0
    fi
    if [[ " ${_replog_valued[$path]} " == *" $prev "* ]]; then
        COMPREPLY=( $(compgen -f -- "$cur") )
        return 0
    fi
    if [[ "$cur" == -* ]]; then
        COMPREPLY=( $(compgen -W "${_replog_options[$path]}" -- "$cur") )
    elif [[ -n "${_replog_commands[$path]}" ]]; then
        COMPREPLY=( $(compgen -W "${_replog_commands[$path]}" -- "$cur") )
    else
        COMPREPLY=( $(compgen -f -- "$cur") )
    fi
    return 0
}
complete -F _replog replog
"""


def _walk(
    parser: argparse.ArgumentParser,
    path: str,
    commands: dict[str, list[str]],
    options: dict[str, list[str]],
    valued: dict[str, list[str]],
    choices: dict[str, list[str]],
) -> None:
    commands[path] = []
    options[path] = []
    valued[path] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                commands[path].append(name)
                _walk(sub, f"{path} {name}".strip(), commands, options, valued, choices)
            continue
        if not action.option_strings:
            if action.choices is not None:  # e.g. `completion bash|zsh`: offered like commands
                commands[path].extend(str(c) for c in action.choices)
            continue
        options[path].extend(action.option_strings)
        if action.nargs == 0:
            continue
        offered = getattr(action, "completions", None) or action.choices
        for opt in action.option_strings:
            if offered is not None:
                choices[f"{path} {opt}"] = [str(c) for c in offered]
            else:
                valued[path].append(opt)


def _assoc(name: str, table: dict[str, list[str]]) -> str:
    items = " ".join(f"[{shlex.quote(k)}]={shlex.quote(' '.join(v))}" for k, v in table.items())
    return f"declare -gA {name}=( {items} )"


def bash_script(parser: argparse.ArgumentParser) -> str:
    commands: dict[str, list[str]] = {}
    options: dict[str, list[str]] = {}
    valued: dict[str, list[str]] = {}
    choices: dict[str, list[str]] = {}
    _walk(parser, "replog", commands, options, valued, choices)
    lines = [
        '# replog bash completion: eval "$(replog completion bash)"',
        _assoc("_replog_commands", commands),
        _assoc("_replog_options", options),
        _assoc("_replog_valued", valued),
        _assoc("_replog_choices", choices),
    ]
    return "\n".join(lines) + "\n" + _FUNCTION.lstrip("\n")


def zsh_script(parser: argparse.ArgumentParser) -> str:
    return (
        '# replog zsh completion: eval "$(replog completion zsh)"\n'
        "autoload -U +X compinit && compinit\n"
        "autoload -U +X bashcompinit && bashcompinit\n" + bash_script(parser)
    )
