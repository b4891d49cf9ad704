"""names.py — a model's metadata name lists (no transport: both clients import it)."""


def model_lists(meta):
    """The lists of an HTTP model metadata answer (characters, joints, morphs,
    controls, shapes, clips, bbox, defaults): its "deformd" extension object
    (KServe's parameters hold scalars only; daemons before it sent them in
    "parameters")."""
    return meta.get("deformd") or meta.get("parameters") or {}


_LIST_OF = {"weights": "morphs", "shape": "shapes"}


def named_input(info, input_name, values):
    """A one-axis input given by name ({"jawOpen": 0.7, ...}) as its full vector.

    info: a model's metadata (HttpClient.info or SocketClient.info). The names
    are the metadata list of the input's length: `morphs` for `weights`,
    `shapes` for `shape`, `controls` otherwise (a rig's `controls`, a retarget
    model's `source_weights`). Values not named keep the input's default (the
    HTTP metadata's `defaults`; 0 otherwise). A name the list does not have,
    or an input with more than one axis, raises ValueError."""
    ins = {i.get("name"): i for i in info.get("inputs", []) if isinstance(i, dict)}
    if input_name not in ins:
        raise ValueError("no input '%s' (inputs: %s)" % (input_name, ", ".join(ins)))
    shape = [d for k, d in enumerate(ins[input_name].get("shape", [])) if not (k == 0 and d == -1)]
    if len(shape) != 1:
        raise ValueError("input '%s' has shape %s: values by name need a one-axis input"
                         % (input_name, shape))
    n = shape[0]
    lists = model_lists(info) or info
    names = lists.get(_LIST_OF.get(input_name, "controls")) or []
    if len(names) != n:
        names = next((lists[k] for k in ("controls", "morphs", "shapes", "joints")
                      if isinstance(lists.get(k), list) and len(lists[k]) == n), [])
    if len(names) != n:
        raise ValueError("input '%s': the metadata names none of its %d values" % (input_name, n))
    default = (lists.get("defaults") or {}).get(input_name)
    out = [float(x) for x in default] if isinstance(default, list) and len(default) == n \
        else [0.0] * n
    index = {nm: k for k, nm in enumerate(names)}
    for nm, v in values.items():
        if nm not in index:
            raise ValueError("input '%s': no value named '%s' (its names: %s)"
                             % (input_name, nm, ", ".join(names)))
        out[index[nm]] = float(v)
    return out


def by_name(client, model, iname, v):
    """v as a tensor-like: a dict of values by name (or a list of them) becomes the
    input's vector through the model's metadata (client.info), fetched once per client and
    model (HttpClient.infer and SocketClient.infer call it)"""
    if not isinstance(v, dict) and not (isinstance(v, (list, tuple)) and v and
                                        all(isinstance(x, dict) for x in v)):
        return v
    cache = client.__dict__.setdefault("_named_info", {})
    if model not in cache:
        cache[model] = client.info(model)
    if isinstance(v, dict):
        return named_input(cache[model], iname, v)
    return [named_input(cache[model], iname, x) for x in v]
