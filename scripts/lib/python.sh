# Sourced by scripts that start python3 many times (scripts/test.sh, the
# experiments' lib.sh). use_debian_python DIR puts Debian's python3 (the
# package scripts/setup.sh installs) first in PATH, through a link in DIR,
# ahead of any version manager's shim: pyenv's takes 0.3 s to start a
# script, Debian's 0.03 s, and the test suite starts python3 over 500
# times. These scripts use only its standard library. Without
# /usr/bin/python3 it does nothing.
use_debian_python() {
  [ -x /usr/bin/python3 ] || return 0
  mkdir -p "$1"
  ln -sf /usr/bin/python3 "$1/python3"
  PATH="$(cd "$1" && pwd):$PATH"
  export PATH
}
