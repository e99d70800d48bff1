#!/bin/sh
# SPDX-License-Identifier: MIT
# The format check of CI (.ci/run runs it before the build): every C++ file git tracks (and every
# new one it does not ignore) must be as Debian 12's clang-format 14 formats it with the
# project's .clang-format. Prints each difference and fails on any. To fix: clang-format-14 -i FILE
# (clang-format-14 comes with scripts/install-deps.sh --all.)
set -eu
cd "$(dirname "$0")/.."

format=""
for candidate in clang-format-14 clang-format; do
  if command -v "$candidate" > /dev/null 2>&1 &&
     "$candidate" --version | grep -q "version 14\."; then
    format=$candidate
    break
  fi
done
if [ -z "$format" ]; then
  echo "check-format: needs clang-format 14 (scripts/install-deps.sh --all installs it);" \
       "other versions format differently" >&2
  exit 2
fi

files=$(git ls-files --cached --others --exclude-standard '*.cpp' '*.hpp' '*.h' |
        while read -r file; do if [ -f "$file" ]; then echo "$file"; fi; done)
# shellcheck disable=SC2086  # tracked C++ paths hold no spaces
if "$format" --dry-run --Werror $files; then
  echo "check-format: $(echo "$files" | wc -l) files formatted as $format formats them"
else
  echo "check-format: the files above differ from $format's format (fix: $format -i FILE)" >&2
  exit 1
fi
