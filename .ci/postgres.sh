#!/usr/bin/env bash
# Start a throwaway PostgreSQL for the tests, on 127.0.0.1 only, and print how to reach it.
#
#   eval "$(.ci/postgres.sh)"        # installs it if missing, starts it, exports MEMORY_MCP_TEST_DSN
#   .ci/postgres.sh stop             # stops it and deletes its data
#
# Idempotent: a second run finds the server already up and prints the same DSN. Only the
# `export ...` line goes to stdout (for eval); everything else goes to stderr. Works as root on a
# fresh Debian machine (apt-get install postgresql; the server runs as the postgres user) and as an
# ordinary user who already has PostgreSQL installed (the server then runs as that user).
#
# Settings (environment): MEMORY_MCP_PG_DIR (default /tmp/memory-mcp-ci-postgres) holds the
# cluster, its log, port and password; MEMORY_MCP_PG_PORT picks the port (default: a free one).
set -euo pipefail

STATE_DIR="${MEMORY_MCP_PG_DIR:-/tmp/memory-mcp-ci-postgres}"
DATA_DIR="$STATE_DIR/data"
LOG_FILE="$STATE_DIR/server.log"
DB_NAME=memory_mcp_test
DB_USER=memory_mcp

say() { echo "postgres.sh: $*" >&2; }
die() { say "$*"; exit 1; }

find_bindir() {
    local dir
    for dir in $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r); do
        if [ -x "$dir/initdb" ] && [ -x "$dir/pg_ctl" ]; then
            echo "$dir"
            return 0
        fi
    done
    if command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1; then
        dirname "$(command -v pg_ctl)"
        return 0
    fi
    return 1
}

install_postgres() {
    [ "$(id -u)" = 0 ] || die "PostgreSQL is not installed and only root can install it (apt-get install postgresql)"
    say "installing PostgreSQL with apt-get"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq >&2
    apt-get install -y -qq postgresql >&2
}

# Run a command as the account that owns the cluster (initdb and postgres refuse to run as root).
as_owner() {
    if [ "$(id -u)" = 0 ]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}

free_port() {
    python3 - <<'EOF'
import socket
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    print(s.getsockname()[1])
EOF
}

port_in_use() {
    python3 - "$1" <<'EOF'
import socket, sys
with socket.socket() as s:
    sys.exit(0 if s.connect_ex(("127.0.0.1", int(sys.argv[1]))) == 0 else 1)
EOF
}

print_dsn() {
    local port password
    port="$(cat "$STATE_DIR/port")"
    password="$(cat "$STATE_DIR/password")"
    echo "export MEMORY_MCP_TEST_DSN=postgresql://$DB_USER:$password@127.0.0.1:$port/$DB_NAME"
}

BINDIR="$(find_bindir || true)"
if [ "${1:-start}" = stop ]; then
    if [ -n "$BINDIR" ] && [ -f "$DATA_DIR/PG_VERSION" ]; then
        as_owner "$BINDIR/pg_ctl" -D "$DATA_DIR" -m fast -w stop >&2 || true
    fi
    rm -rf "$STATE_DIR"
    say "stopped and removed $STATE_DIR"
    exit 0
fi
[ "${1:-start}" = start ] || die "usage: $0 [start|stop]"

if [ -z "$BINDIR" ]; then
    install_postgres
    BINDIR="$(find_bindir)" || die "apt-get installed postgresql but no initdb/pg_ctl was found"
fi
command -v python3 >/dev/null 2>&1 || die "python3 is needed to pick a free port"

# Already running and answering (a second run): nothing to do but say where it is.
if [ -f "$DATA_DIR/PG_VERSION" ] && [ -f "$STATE_DIR/port" ] \
    && as_owner "$BINDIR/pg_ctl" -D "$DATA_DIR" status >/dev/null 2>&1 \
    && "$BINDIR/pg_isready" -q -h 127.0.0.1 -p "$(cat "$STATE_DIR/port")" -t 5; then
    say "already running on 127.0.0.1:$(cat "$STATE_DIR/port") ($DATA_DIR)"
    print_dsn
    exit 0
fi

umask 077
mkdir -p "$STATE_DIR"
chmod 700 "$STATE_DIR"
if [ "$(id -u)" = 0 ]; then
    chown postgres:postgres "$STATE_DIR"
fi

fresh=0
if [ ! -f "$DATA_DIR/PG_VERSION" ]; then
    rm -rf "$DATA_DIR"
    python3 -c 'import secrets; print(secrets.token_hex(16))' >"$STATE_DIR/password"
    python3 -c 'import secrets; print(secrets.token_hex(16))' >"$STATE_DIR/superuser-password"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$STATE_DIR/password" "$STATE_DIR/superuser-password"
    say "creating a cluster in $DATA_DIR"
    as_owner "$BINDIR/initdb" -D "$DATA_DIR" -U postgres --auth=scram-sha-256 \
        --pwfile="$STATE_DIR/superuser-password" -E UTF8 --locale=C.UTF-8 >"$STATE_DIR/initdb.log" 2>&1 \
        || { cat "$STATE_DIR/initdb.log" >&2; die "initdb failed"; }
    fresh=1
fi

# Start on a free loopback port (retry if another program takes it first).
started=0
for attempt in 1 2 3 4 5; do
    if [ -n "${MEMORY_MCP_PG_PORT:-}" ]; then
        port="$MEMORY_MCP_PG_PORT"
    elif [ -f "$STATE_DIR/port" ] && ! port_in_use "$(cat "$STATE_DIR/port")"; then
        port="$(cat "$STATE_DIR/port")"
    else
        port="$(free_port)"
    fi
    echo "$port" >"$STATE_DIR/port"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$STATE_DIR/port"
    if as_owner "$BINDIR/pg_ctl" -D "$DATA_DIR" -l "$LOG_FILE" -w -t 60 start \
        -o "-c listen_addresses=127.0.0.1 -c port=$port -c unix_socket_directories='$STATE_DIR' -c max_connections=200" \
        >&2; then
        started=1
        break
    fi
    say "start on port $port failed (attempt $attempt); log tail:"
    tail -n 5 "$LOG_FILE" >&2 || true
    [ -n "${MEMORY_MCP_PG_PORT:-}" ] && break
done
[ "$started" = 1 ] || die "could not start PostgreSQL (see $LOG_FILE)"

if [ "$fresh" = 1 ]; then
    password="$(cat "$STATE_DIR/password")"
    as_owner env PGPASSWORD="$(cat "$STATE_DIR/superuser-password")" \
        "$BINDIR/psql" -X -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p "$port" -U postgres -d postgres >&2 <<EOF
CREATE ROLE $DB_USER LOGIN PASSWORD '$password';
CREATE DATABASE $DB_NAME OWNER $DB_USER;
EOF
fi

say "running on 127.0.0.1:$port ($DATA_DIR; log $LOG_FILE)"
print_dsn
