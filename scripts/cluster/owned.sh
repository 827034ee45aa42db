# shellcheck shell=bash
# Sourced by scripts/docker-engine.sh (and tests/cluster/test_owned.py): how it, run as root, tells
# what it made from what was there already or is someone else's, so that a stop acts only on its own.
# The cluster's tool keeps the same records in Python (scripts/cluster/kubecluster/owned.py).
#
# A process is named by its pid *and* its start time (field 22 of /proc/PID/stat, clock ticks after
# boot): a pid file outlives a crash or a reboot, and its pid may by then be another process's.
# A mount is named by its mount id and mount point, compared with the table as it was before start.

started_at() { # started_at PID: the process's start time; nothing where no such process runs
    local stat fields
    stat="$(cat "/proc/$1/stat" 2>/dev/null)" || return 0
    # the fields after the command name, which may itself hold spaces and parentheses; field 3 first
    read -r -a fields <<<"${stat##*) }"
    echo "${fields[19]:-}"
}

remember_pid() { # remember_pid FILE PID: what names the process the caller just started
    local start
    start="$(started_at "$2")"
    echo "$2 ${start:-gone}" >"$1"
}

owned_pid() { # owned_pid FILE: the pid FILE names, where that pid is still the process that was started
    local pid="" start=""
    [ -f "$1" ] || return 1
    read -r pid start <"$1" || true
    [[ "$pid" =~ ^[1-9][0-9]*$ ]] && [ -n "$start" ] && [ "$(started_at "$pid")" = "$start" ] || return 1
    echo "$pid"
}

stop_owned() { # stop_owned SECONDS FILE...: SIGTERM each process the files name that is still the one
    # started (its session too: each runs in a session of its own), SIGKILL after SECONDS; a pid now
    # another process's is never signalled
    local seconds="$1" file pid files=()
    shift
    for file in "$@"; do
        pid="$(owned_pid "$file")" || continue
        kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
        files+=("$file")
    done
    [ ${#files[@]} = 0 ] && return 0
    local deadline=$((SECONDS + seconds)) alive
    while [ $SECONDS -lt $deadline ]; do
        alive=0
        for file in "${files[@]}"; do owned_pid "$file" >/dev/null && alive=1; done
        [ $alive = 0 ] && return 0
        sleep 0.1
    done
    for file in "${files[@]}"; do
        pid="$(owned_pid "$file")" || continue
        kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
    done
}

private_dir() { # private_dir DIR...: folders only root reads or writes (0700), made where missing
    install -d -m 700 "$@"
}

mount_table() { # the mounts as "ID POINT" lines (the point escaped as /proc/self/mountinfo writes it)
    awk '{print $1, $5}' /proc/self/mountinfo
}

mounts_since() { # mounts_since SNAPSHOT PREFIX...: mount points under a PREFIX that are not in
    # SNAPSHOT (a mount_table taken before start), deepest first; none where SNAPSHOT is missing, all
    # under the prefixes where it is /dev/null
    local snapshot="$1"
    shift
    [ -r "$snapshot" ] || return 0
    mount_table | awk -v prefixes="$*" '
        FILENAME == ARGV[1] { before[$0] = 1; next }
        ($0 in before) { next }
        {
            n = split(prefixes, list, " ")
            for (i = 1; i <= n; i++)
                if ($2 == list[i] || index($2, list[i] "/") == 1) { print length($2), $2; break }
        }' "$snapshot" - | sort -rn | cut -d' ' -f2-
}

unescape_mount() { printf '%b' "$1"; } # mountinfo writes a space as \040
