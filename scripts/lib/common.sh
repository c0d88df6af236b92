# Helpers every script of the project shares (sourced; the caller defines `say` and `die`).

# True when something answers on 127.0.0.1:$1 (a listener, or a socket holding the port).
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

# The first port from $1 up that nothing answers on.
first_free_port() {
  local port=$1
  while port_in_use "$port"; do port=$((port + 1)); done
  echo "$port"
}

# $1 random bytes as lowercase hex (passwords, secrets).
random_hex() { head -c "$1" /dev/urandom | od -An -tx1 | tr -d ' \n'; }

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
