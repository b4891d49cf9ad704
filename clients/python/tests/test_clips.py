"""test_clips.py — clip names as the clients take them (issue 14.5), no server:
  - match_clip: the exact name, else the one equal ignoring case, else the
    only one containing it ignoring case ("walk" -> "Wuson_Walk"); none or
    several: DeformdError naming the clips there are;
  - default_clip (render_clip.py without --clip): the clip named like *walk*
    in any case, else the first.
Run by tests/e2e/python_client.sh (prints "ok NAME" / "FAIL NAME").
usage: python3 test_clips.py
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from deformd_client import DeformdError  # noqa: E402
from deformd_client.clips import match_clip, default_clip, clip_names  # noqa: E402

fails = 0


def check(name, cond, detail=""):
    global fails
    if cond:
        print("ok " + name)
    else:
        fails += 1
        print("FAIL %s %s" % (name, detail))


def err(names, want):
    try:
        return "no error: %r" % match_clip(names, want, "wuson")
    except DeformdError as e:
        return str(e)


def main():
    wuson = ["Wuson_Run", "Wuson_Walk", "Wuson_Bind"]
    for want, got in (("Wuson_Walk", "Wuson_Walk"), ("wuson_walk", "Wuson_Walk"),
                      ("walk", "Wuson_Walk"), ("WALK", "Wuson_Walk"), ("run", "Wuson_Run"),
                      ("bind", "Wuson_Bind")):
        try:
            r = match_clip(wuson, want)
        except DeformdError as e:
            r = e
        check("py-clip-match-%s" % want, r == got, r)
    e = err(wuson, "wuson")
    check("py-clip-ambiguous-lists", "several" in e and "Wuson_Run" in e and "Wuson_Walk" in e, e)
    e = err(wuson, "jump")
    check("py-clip-none-lists", "no clip 'jump'" in e and "Wuson_Run, Wuson_Walk, Wuson_Bind" in e, e)
    check("py-clip-empty-not-a-match", "no clip" in err(wuson, ""), err(wuson, ""))
    check("py-clip-no-clips", "has no clips" in err([], "walk"), err([], "walk"))
    # an exact name wins over longer names containing it
    check("py-clip-exact-first", match_clip(["walk_fast", "walk"], "walk") == "walk")
    check("py-clip-case-exact-first", match_clip(["Walk_Fast", "Walk"], "walk") == "Walk")
    # render_clip.py's default
    check("py-clip-default-walk", default_clip(wuson) == "Wuson_Walk", default_clip(wuson))
    check("py-clip-default-walk-any-case", default_clip(["Idle", "WALKING"]) == "WALKING")
    check("py-clip-default-first", default_clip(["Square", "Spin"]) == "Square")
    check("py-clip-default-none", default_clip([]) is None)
    # names from a socket INFO answer and from HTTP metadata
    check("py-clip-names-info", clip_names({"clips": [{"name": "A"}, {"name": "B"}]}) == ["A", "B"])
    check("py-clip-names-metadata",
          clip_names({"parameters": {"clips": [{"name": "A", "keys": 2}]}}) == ["A"])
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
