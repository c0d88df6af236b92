#!/usr/bin/env bash
# Releases (issue 55; CHANGELOG.md, README "Upgrading").
#
#   scripts/release.sh previous     build the previous release from its own commit, once per machine; print the
#                                   folder of its build (its sources in src/, its binary at
#                                   src/.build/debug/poopypals with its tests built, its own migrations in sql/)
#   scripts/release.sh current      print this release's version (CHANGELOG.md's newest release)
#   scripts/release.sh previous-version   print the previous release's version and commit
#
# The previous release is CHANGELOG.md's second `## [X.Y.Z]` heading, which names the commit it was cut from
# (`commit <40 hex digits>`). Its build is cached in /var/cache/poopypals/releases/ as root, else in
# ${XDG_CACHE_HOME:-~/.cache}/poopypals/releases/ (POOPYPALS_RELEASE_CACHE chooses another folder): a first
# build takes about as long as this checkout's first (minutes on two cores), later runs reuse it. A lock keeps
# two runs from building one release at once.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SWIFT=${SWIFT:-swift}
say() { echo "release: $*" >&2; }
die() { echo "release: error: $*" >&2; exit 1; }

# The Nth release heading of CHANGELOG.md: "VERSION COMMIT" (COMMIT empty when the heading names none).
heading() {
  local line version commit
  line=$(grep -E '^## \[[0-9]+\.[0-9]+\.[0-9]+\]' "$ROOT/CHANGELOG.md" | sed -n "$1p")
  [ -n "$line" ] || return 1
  version=$(grep -oE '\[[0-9]+\.[0-9]+\.[0-9]+\]' <<<"$line" | head -1 | tr -d '[]')
  commit=$(grep -oE 'commit [0-9a-f]{40}' <<<"$line" | head -1 | cut -c8-) || true
  echo "$version $commit"
}

cache_root() {
  if [ -n "${POOPYPALS_RELEASE_CACHE:-}" ]; then echo "$POOPYPALS_RELEASE_CACHE"
  elif [ "$(id -u)" = 0 ]; then echo /var/cache/poopypals/releases
  else echo "${XDG_CACHE_HOME:-$HOME/.cache}/poopypals/releases"; fi
}

build_previous() {
  read -r version commit < <(heading 2) || die "CHANGELOG.md names no previous release (a second '## [X.Y.Z]' heading)"
  [ -n "$commit" ] || die "CHANGELOG.md's release $version names no commit ('commit <40 hex digits>' in its heading)"
  git -C "$ROOT" cat-file -e "$commit^{commit}" 2>/dev/null \
    || die "commit $commit (release $version) is not in this clone's history: fetch it (git fetch origin)"
  local dir; dir="$(cache_root)/$version-${commit:0:12}"
  mkdir -p "$(dirname "$dir")"
  exec 9>"$dir.lock"
  flock 9
  if [ -f "$dir/built" ] && [ -x "$dir/src/.build/debug/poopypals" ]; then
    echo "$dir"; return
  fi
  say "building release $version from commit ${commit:0:12} into $dir (once per machine)"
  rm -rf "$dir"; mkdir -p "$dir/src"
  git -C "$ROOT" archive --format=tar "$commit" | tar -x -C "$dir/src"
  cp -R "$dir/src/sql" "$dir/sql"
  local started=$SECONDS
  (cd "$dir/src" && "$SWIFT" build --build-tests >&2) || die "release $version did not build (in $dir/src)"
  echo "$version $commit" >"$dir/built"
  say "release $version built in $((SECONDS - started)) s"
  echo "$dir"
}

case "${1:-}" in
  previous) build_previous ;;
  current) heading 1 | cut -d' ' -f1 ;;
  previous-version) heading 2 ;;
  *) die "usage: scripts/release.sh previous|current|previous-version" ;;
esac
