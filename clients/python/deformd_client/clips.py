"""clips.py — which clip a name designates, as deformctl (df_client_clip_match).

`match_clip(names, want)`: the name equal to `want`, else the one equal
ignoring case, else the only one containing it ignoring case ("walk" ->
"Wuson_Walk"). No match, or several: DeformdError listing the clips there are.
`default_clip(names)`: the first clip whose name contains "walk" (any case),
else the first clip (render_clip.py's default).
"""
from .http import DeformdError
from .names import model_lists, named_input  # noqa: F401 (re-exported)


def match_clip(names, want, character=None):
    names = [n for n in names if isinstance(n, str)]
    if want in names:
        return want
    w = (want or "").lower()
    same = [n for n in names if n.lower() == w]
    if len(same) == 1:
        return same[0]
    part = same or ([n for n in names if w in n.lower()] if w else [])
    if len(part) == 1:
        return part[0]
    who = " of %s" % character if character else ""
    if part:
        raise DeformdError("%r matches several clips%s: %s" % (want, who, ", ".join(part)))
    if not names:
        raise DeformdError("no clip %r%s: it has no clips" % (want, who))
    raise DeformdError("no clip %r%s (clips: %s)" % (want, who, ", ".join(names)))


def default_clip(names):
    names = [n for n in names if isinstance(n, str)]
    if not names:
        return None
    return next((n for n in names if "walk" in n.lower()), names[0])


def clip_names(info):
    """Clip names of an info()/metadata answer (socket INFO, or HTTP
    metadata's "deformd" extension object: deformd.clips)."""
    clips = info.get("clips")
    if clips is None:
        clips = model_lists(info).get("clips", [])
    return [c.get("name") if isinstance(c, dict) else c for c in clips or []]


__all__ = ["match_clip", "default_clip", "clip_names", "named_input"]
