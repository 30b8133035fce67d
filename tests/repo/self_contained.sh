#!/usr/bin/env bash
# The repository stands on its own: no file may cite documents that live outside it (notes of
# its authors such as a design, paper, style or peers summary kept beside the checkout).
# Usage: self_contained.sh SOURCE_DIR. Exit 0 when clean, 1 listing each offending line.
# The pattern is spelled with bracket expressions so that this file does not match itself.
set -u
src=${1:?usage: self_contained.sh SOURCE_DIR}
cd "$src" || exit 1
pat='\b(DESIG[N]|PAPE[R]|STYL[E]|PEER[S])\.md\b|\.\.[/]shared'
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    hits=$(git grep -n -I -E "$pat" -- . 2>/dev/null)
else
    hits=$(grep -r -n -I -E "$pat" --exclude-dir=.git --exclude-dir='build*' \
        --exclude-dir=.venv --exclude-dir=node_modules . 2>/dev/null)
fi
if [ -n "$hits" ]; then
    echo "references to documents outside the repository (cite docs/ instead):"
    echo "$hits"
    exit 1
fi
echo "no references to documents outside the repository"
exit 0
