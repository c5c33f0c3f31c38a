# bash completion for mlsetup(1), generated from mlsetup's argument parser by tools/gen_docs.py; do not edit
# shellcheck shell=bash

_mlsetup() {
    local cur=${COMP_WORDS[COMP_CWORD]} prev=""
    ((COMP_CWORD > 0)) && prev=${COMP_WORDS[COMP_CWORD - 1]}
    # --answers=FILE: bash splits the word at '=' (COMP_WORDBREAKS)
    if [[ $cur == "=" ]]; then
        cur="" prev=${COMP_WORDS[COMP_CWORD - 1]}
    elif [[ $prev == "=" ]] && ((COMP_CWORD > 1)); then
        prev=${COMP_WORDS[COMP_CWORD - 2]}
    fi

    case $prev in
        --root)
            compopt -o filenames 2>/dev/null
            mapfile -t COMPREPLY < <(compgen -d -- "$cur")
            return ;;
        --answers|--facts|--output|-o)
            compopt -o filenames 2>/dev/null
            mapfile -t COMPREPLY < <(compgen -f -- "$cur")
            return ;;
    esac

    # the command: the first word that is neither an option nor an option's value
    local command="" i
    for ((i = 1; i < COMP_CWORD; i++)); do
        case ${COMP_WORDS[i]} in
            --answers|--facts|--output|--root|--ticket|-o)
                ((i++))
                [[ ${COMP_WORDS[i]} == "=" ]] && ((i++)) ;;
            -*) ;;
            *) command=${COMP_WORDS[i]}; break ;;
        esac
    done

    local opts=""
    case $command in
        "") opts="-h --help --root --dry-run --answers --facts --version" ;;
        probe) opts="-h --help --root --dry-run --json" ;;
        plan) opts="-h --help --root --dry-run --answers --facts --json" ;;
        lock) opts="-h --help --root --dry-run --answers --facts -o --output --json" ;;
        apply) opts="-h --help --root --dry-run --answers --facts --resume --foreground" ;;
        attach) opts="-h --help --root --dry-run" ;;
        answers) opts="-h --help --root --dry-run --schema" ;;
        *) return ;;
    esac
    if [[ -z $command && $cur != -* ]]; then
        mapfile -t COMPREPLY < <(compgen -W "probe plan lock apply attach answers" -- "$cur")
    else
        mapfile -t COMPREPLY < <(compgen -W "$opts" -- "$cur")
    fi
}
complete -F _mlsetup mlsetup
