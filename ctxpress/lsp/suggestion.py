"""What of a completion is shown: never the lines that already follow the cursor."""

from __future__ import annotations


def without_following_lines(completion: str, after: str) -> str:
    """Drop the completion's last lines when they repeat the lines right after the cursor's line
    (the model re-typing what is already there), and trailing blank lines it leaves."""
    lines = completion.split("\n")
    if len(lines) < 2:
        return completion
    following = [line.strip() for line in after.split("\n")[1:len(lines)]]
    for k in range(min(len(lines) - 1, len(following)), 0, -1):
        tail = [line.strip() for line in lines[-k:]]
        if tail == following[:k] and any(tail):
            lines = lines[:-k]
            break
    while len(lines) > 1 and not lines[-1].strip():
        lines.pop()
    return "\n".join(lines)
