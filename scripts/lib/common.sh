# Helpers every script of the project shares (sourced; the caller defines `say` and `die`).

# True when something answers on 127.0.0.1:$1 (a listener, or a socket holding the port).
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# port_busy: something answers on port $1 or a socket holds it; first_free_port: the first port from $1 up that is
# not busy. In the kernel's ephemeral range (32768-60999) a port nothing listens on can still be the local end of a
# client connection, and bind() then fails (the Citus stage of a fresh-clone run: its worker's port 55464 was held
# so, right after the suites). TIME-WAIT leftovers do not count (PostgreSQL and PgBouncer bind with SO_REUSEADDR).
port_busy() {
  port_in_use "$1" || [ -n "$(ss -Htan exclude time-wait "( sport = :$1 )" 2>/dev/null)" ]
}
first_free_port() {
  local port=$1
  while port_busy "$port"; do port=$((port + 1)); done
  echo "$port"
}

# The roles `poopypals migrate` made for the database at URL $2 (sql/0022: poopypals_app_<tag>,
# poopypals_profiles_<tag>), as the list a DROP ROLE takes, asked with the psql $1; empty when it has none. Ask before
# dropping the database: roles belong to the cluster, and a dropped database's stay behind (every make test left
# about eight on its servers) and keep its name's roles from another owner's migration of a database of that name.
database_roles() {
  "$1" "$2" -X -A -t -q -c "SELECT quote_ident(poopypals_service_role()) || ', ' || quote_ident(poopypals_profiles_role())" \
    2>/dev/null || true
}

# $1 random bytes as lowercase hex (passwords, secrets).
random_hex() { head -c "$1" /dev/urandom | od -An -tx1 | tr -d ' \n'; }

# Where a throw-away server's state (and PostgreSQL 18's venv) goes when the postgres user cannot enter the checkout
# (only as root): a folder of root's that no other user can write, so that no one can prepare a path there for the
# scripts to trust and run (a predictable /tmp path could be: a planted venv's pip would run as root).
PRIVATE_PARENT=/var/lib/poopypals
private_parent() {
  install -d -m 755 -o root -g root "$PRIVATE_PARENT" || die "cannot create $PRIVATE_PARENT"
  [ ! -L "$PRIVATE_PARENT" ] && [ "$(stat -c %U:%a "$PRIVATE_PARENT")" = root:755 ] \
    || die "$PRIVATE_PARENT must be root's alone (755, not a link)"
}

# Run a server command as the cluster owner: `postgres` when we are root (PostgreSQL refuses root).
as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# apt-get install the Debian packages named when we are root on Debian (updating the index once if needed);
# else fail with the command to run.
apt_install() {
  [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null || die "missing: $* (Debian/Ubuntu, as root: apt-get install $*)"
  say "installing $*"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null 2>&1 \
    || { apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$@" >/dev/null; } \
    || die "apt-get install $* failed"
}

# Starts PgBouncer on $1/pgbouncer.ini (the caller writes it) with binary $2, and waits until it listens on port $3;
# $4 names it in messages. Returns 0 once it listens; 1 when the port is held by another socket after all (the
# caller takes another port and writes the ini again); dies on anything else.
launch_pgbouncer() {
  local dir=$1 bin=$2 port=$3 label=$4
  as_owner rm -f "$dir/pgbouncer.log"
  as_owner "$bin" -d "$dir/pgbouncer.ini" >/dev/null 2>&1 || { as_owner tail -5 "$dir/pgbouncer.log" >&2; die "$label did not start"; }
  for _ in $(seq 50); do
    port_in_use "$port" && return 0
    as_owner grep -q "nowhere to listen" "$dir/pgbouncer.log" 2>/dev/null && break
    sleep 0.1
  done
  port_in_use "$port" && return 0
  # A free-looking port in the kernel's ephemeral range (32768-60999) can be the local end of a client
  # connection: nothing listens there, yet bind() fails. Seen once on a busy run.
  as_owner grep -q "Address already in use" "$dir/pgbouncer.log" 2>/dev/null \
    || { as_owner tail -5 "$dir/pgbouncer.log" >&2 || true; die "$label is not listening on $port"; }
  say "127.0.0.1:$port is held by another socket; trying the next port"
  return 1
}
