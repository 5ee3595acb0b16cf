#!/bin/sh
# Print an interpreter for the project's environment: Python 3.13 when available, else the newest >= 3.11.
for candidate in python3.13 /root/.pyenv/versions/3.13.0/bin/python3 python3.12 python3.11 python3; do
    if command -v "$candidate" >/dev/null 2>&1 && "$candidate" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; then
        command -v "$candidate"
        exit 0
    fi
done
if command -v pyenv >/dev/null 2>&1 && PYENV_VERSION=3.13.0 python3.13 -c 'pass' 2>/dev/null; then
    PYENV_VERSION=3.13.0 pyenv which python3.13
    exit 0
fi
echo "no Python >= 3.11 found" >&2
exit 1
