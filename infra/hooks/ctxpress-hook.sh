#!/bin/sh
# ctxpress index hook: installed by `ctxpress hooks install`, removed by `ctxpress hooks uninstall`
# (which puts back the hook that was here before). It publishes what the commit changed to the
# index stream and returns at once; it never fails the git command.
hook_name=$(basename "$0")
hook_dir=$(dirname "$0")
stdin_copy=""
if [ "$hook_name" = "post-rewrite" ] && [ -x "$hook_dir/$hook_name.ctxpress-chained" ]; then
    # post-rewrite gets the rewritten commits on stdin: keep a copy for the chained hook
    stdin_copy=$(mktemp 2>/dev/null) && cat > "$stdin_copy"
fi
@PYTHON@ -I -S @PUBLISHER@ "$hook_name" "$@" --repository @REPOSITORY@ --nats @NATS_URL@@CREDENTIALS@ </dev/null
status=0
if [ -x "$hook_dir/$hook_name.ctxpress-chained" ]; then
    if [ -n "$stdin_copy" ]; then
        "$hook_dir/$hook_name.ctxpress-chained" "$@" < "$stdin_copy"
    else
        "$hook_dir/$hook_name.ctxpress-chained" "$@"
    fi
    status=$?
fi
[ -n "$stdin_copy" ] && rm -f "$stdin_copy"
exit $status
