#!/bin/sh
# check-doc-pointers.sh — fails when a pointer in the docs does not resolve: a relative Markdown
# link (and its #anchor, which must name a heading there), a `folder/file` in backticks whose first
# folder is one of the repository's (`a.{h,c}` names both), or a bare `name.md`; a pointer out of
# the repository (`../x`) fails too, so what the code relies on is written in docs/. Read: the
# top-level *.md, docs/*.md and every README.md; in every other tracked file, each docs/ document
# it names. Globs and placeholders (`<…>`, `*`, `$`), build outputs (build/ bin/ cache/ out/
# voices/ models/) and git-ignored paths are not pointers.
# Usage: scripts/check-doc-pointers.sh [ROOT]   (default: the repository holding this script)
set -u
cd "${1:-$(dirname "$0")/..}" || exit 2
tmp=${TMPDIR:-/tmp}/qv-docptr.$$
trap 'rm -f "$tmp".*' EXIT
# What exists: tracked files when this is a git work tree (an untracked file is not in a fresh
# clone; a new file not yet added counts), else every file; folders are the parents of those files.
in_git=0
if git rev-parse --is-inside-work-tree >/dev/null 2>&1 && [ "$(git rev-parse --show-prefix)" = "" ]; then
  in_git=1
  git ls-files --cached --others --exclude-standard > "$tmp.files"
else
  find . -type f ! -path './.git/*' | sed 's|^\./||' > "$tmp.files"
fi
awk -F/ '{ p = ""; for (i = 1; i < NF; i++) { p = p (i > 1 ? "/" : "") $i; print p } }' "$tmp.files" |
  sort -u > "$tmp.dirs"
cut -d/ -f1 "$tmp.dirs" | sort -u | grep -Ev '^(build|bin|cache|out|voices|models)$' > "$tmp.tops"
docs=$(grep -E '^[^/]*\.md$|^docs/[^/]*\.md$|(^|/)README\.md$' "$tmp.files" | sort -u)
[ -n "$docs" ] || { echo "check-doc-pointers: no Markdown files found" >&2; exit 2; }
# One "file<TAB>line<TAB>kind<TAB>pointer" per candidate, outside fenced code blocks.
for f in $docs; do
  awk -v f="$f" '
    # `a/b.{h,c}` names a/b.h and a/b.c
    function code(t,   n, alt, i, pre, post) {
      if (t !~ /^[^{} ]*\{[^{} ]*,[^{} ]*\}[^{} ]*$/) { print f "\t" NR "\tcode\t" t; return }
      pre = substr(t, 1, index(t, "{") - 1); post = substr(t, index(t, "}") + 1)
      n = split(substr(t, index(t, "{") + 1, index(t, "}") - index(t, "{") - 1), alt, ",")
      for (i = 1; i <= n; i++) print f "\t" NR "\tcode\t" pre alt[i] post
    }
    /^[ \t]*```/ { fence = !fence; next }
    fence { next }
    {
      s = $0
      while (match(s, /\]\([^) ]+\)/)) { print f "\t" NR "\tlink\t" substr(s, RSTART + 2, RLENGTH - 3); s = substr(s, RSTART + RLENGTH) }
      s = $0
      while (match(s, /`[^`]+`/)) { code(substr(s, RSTART + 1, RLENGTH - 2)); s = substr(s, RSTART + RLENGTH) }
    }' "$f"
done > "$tmp.cand"
exists() { grep -qxF -- "$1" "$tmp.files" || grep -qxF -- "${1%/}" "$tmp.dirs"; }
# The anchors of a Markdown file's headings, as GitHub makes them: lower case, punctuation
# dropped, spaces to hyphens.
anchors() {
  LC_ALL=C awk '
    /^[ \t]*```/ { fence = !fence; next }
    !fence && /^#+ / {
      h = $0; sub(/^#+ +/, "", h); h = tolower(h)
      gsub(/\342\200\224|\342\200\223|\342\206\222|\303\227|\342\200\246|\302\247|\302\267/, "", h)
      gsub(/[^a-z0-9 _\200-\377-]/, "", h); gsub(/ /, "-", h); print h
    }' "$1"
}
bad=0
tab=$(printf '\t')
while IFS="$tab" read -r f line kind p; do
  case $kind in
  link)
    case $p in http:*|https:*|mailto:*|\#*) continue ;; esac
    target=${p%%#*}
    anchor=
    case $p in *\#*) anchor=${p#*#} ;; esac
    dir=$(dirname "$f")
    path=$target
    [ -n "$target" ] || path=$(basename "$f")
    [ "$dir" = . ] || path="$dir/$path"
    # normalise a/b/../c and ./a
    path=$(printf '%s\n' "$path" | awk -F/ '{ n = 0; for (i = 1; i <= NF; i++) { if ($i == "." || $i == "") continue; if ($i == "..") { if (n == 0) { print "/OUTSIDE"; exit } n--; continue } a[++n] = $i } o = a[1]; for (i = 2; i <= n; i++) o = o "/" a[i]; print o }')
    ;;
  code)
    case $p in *[\<\>\*\{\}\$\ ]*|*…*|*...*|~*|/*) continue ;; esac
    case $p in ../*) path=/OUTSIDE ;;
    */*)
      p=${p%%:*}; p=${p%%(*}
      top=${p%%/*}
      grep -qxF -- "$top" "$tmp.tops" || continue
      git check-ignore -q -- "$p" 2>/dev/null && continue  # made by a run (git-ignored)
      path=$p ;;
    *.md)  # a bare document name: beside the citing file, in docs/ or at the top
      dir=$(dirname "$f")
      if exists "$dir/$p" || exists "docs/$p" || exists "$p"; then continue; fi
      path=$p ;;
    *) continue ;;
    esac ;;
  esac
  if [ "$path" = /OUTSIDE ] || ! exists "$path"; then
    echo "check-doc-pointers: $f:$line: \`$p\` does not resolve to a file of the repository"
    bad=$((bad + 1))
  elif [ "$kind" = link ] && [ -n "$anchor" ] && [ "${path%.md}" != "$path" ] &&
       ! anchors "$path" | grep -qxF -- "$anchor"; then
    echo "check-doc-pointers: $f:$line: \`$p\`: $path has no heading with that anchor"
    bad=$((bad + 1))
  fi
done < "$tmp.cand"
# Code, scripts and data name documents too: each docs/ document they mention must exist (this
# script and its test name missing ones on purpose).
not_here=':!*.md :!scripts/check-doc-pointers.sh :!tests/unit/test_docs.c'
if [ $in_git = 1 ]; then
  # shellcheck disable=SC2086 # the pathspecs split on purpose
  for d in $(git grep --untracked -I -ohE 'docs/[A-Za-z0-9_-]+\.md' -- $not_here | sort -u); do
    exists "$d" && continue
    # shellcheck disable=SC2086
    git grep --untracked -I -nF -- "$d" -- $not_here | sed 's/^\([^:]*:[0-9]*\):.*/\1/' | while IFS= read -r at; do
      echo "check-doc-pointers: $at: \`$d\` does not resolve to a file of the repository"
    done
    bad=$((bad + 1))
  done
fi
if [ "$bad" -gt 0 ]; then echo "check-doc-pointers: $bad pointer(s) do not resolve"; exit 1; fi
echo "check-doc-pointers: ok ($(wc -l < "$tmp.cand") candidates in $(printf '%s\n' "$docs" | wc -l) files)"
