"""Check a KServe InferenceService manifest with the kserve SDK's own models (run as a script).

    python kserve_check.py SDK_DIR MANIFEST.yaml

SDK_DIR holds the kserve and kubernetes packages unpacked from their wheels. The SDK cannot be
installed beside MLServer (kserve 0.21 needs starlette >= 1.3 and pandas < 3, MLServer 1.7 the
opposite), so only its generated OpenAPI models are loaded here, without the package's
``__init__`` (which starts its model server's imports). Every key of the manifest is built into
the SDK's model class for it (``openapi_types``, ``attribute_map``) — an unknown key is an error,
the classes' own checks (required fields, enums) run — and the object serialized back by the
SDK's ApiClient must give the manifest again. Prints one JSON line: {"problems": [...]}.
"""

import json
import re
import sys
import types

NATIVE = {"str": str, "int": int, "float": (int, float), "bool": bool, "object": object}


def _namespace(name, root):
    """Import ``name`` as a bare namespace package under ``root`` (its __init__ not run)."""
    package = types.ModuleType(name)
    package.__path__ = [f"{root}/{name.replace('.', '/')}"]
    sys.modules[name] = package


def _models(root):
    for name in ("kserve", "kubernetes", "kubernetes.client"):
        _namespace(name, root)
    import importlib

    return tuple(importlib.import_module(m) for m in ("kserve.models",
                                                       "kubernetes.client.models"))


def build(data, klass, where, models, problems):
    """``data`` as an instance of the SDK type named ``klass``; problems appended."""
    inner = re.fullmatch(r"[lL]ist\[(.*)\]", klass)
    if inner:
        return [build(x, inner[1], f"{where}[{i}]", models, problems) for i, x in enumerate(data)]
    inner = re.fullmatch(r"dict\(([^,]*), (.*)\)|Dict\[([^,]*), (.*)\]", klass)
    if inner:
        value = inner[2] or inner[4]
        return {k: build(v, value, f"{where}.{k}", models, problems) for k, v in data.items()}
    if klass in NATIVE:
        if not isinstance(data, NATIVE[klass]):
            problems.append(f"{where}: {data!r} is not {klass}")
        return data
    cls = next((getattr(m, klass) for m in models if hasattr(m, klass)), None)
    if cls is None:
        problems.append(f"{where}: the SDK has no type {klass}")
        return data
    return _instance(cls, data, where, models, problems)


def _instance(cls, data, where, models, problems):
    if not isinstance(data, dict):
        problems.append(f"{where}: {cls.__name__} needs a mapping, got {data!r}")
        return None
    keys = {json_key: attr for attr, json_key in cls.attribute_map.items()}
    problems.extend(f"{where}.{k}: not a field of {cls.__name__}" for k in data if k not in keys)
    kwargs = {keys[k]: build(v, cls.openapi_types[keys[k]], f"{where}.{k}", models, problems)
              for k, v in data.items() if k in keys}
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        problems.append(f"{where}: {cls.__name__}: {exc}")
        return None


def check(root, manifest):
    import yaml

    models = _models(root)
    from kserve.api_client import ApiClient

    doc = yaml.safe_load(open(manifest, encoding="utf-8"))
    problems = []
    service = build(doc, "V1beta1InferenceService", "$", models, problems)
    if not problems:
        problems.extend(differences(doc, ApiClient().sanitize_for_serialization(service), "$"))
    return problems


def differences(doc, back, where):
    """Where the SDK's serialization ``back`` differs from ``doc`` (keys the SDK adds with an
    empty default, such as the container ``name: ""`` of a model spec, are not differences)."""
    if isinstance(doc, dict) and isinstance(back, dict):
        added = [f"{where}.{k}: added by the SDK as {v!r}" for k, v in back.items()
                 if k not in doc and v not in ("", None, [], {})]
        return added + [d for k, v in doc.items()
                        for d in differences(v, back.get(k), f"{where}.{k}")]
    return [] if doc == back else [f"{where}: {doc!r} comes back as {back!r}"]


if __name__ == "__main__":
    print(json.dumps({"problems": check(sys.argv[1], sys.argv[2])}))
