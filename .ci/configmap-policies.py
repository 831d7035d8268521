#!/usr/bin/env python3
"""Write the policy files the ConfigMaps of deploy/kubernetes/ carry into OUT/SHAPE/, so
CI can lint them with `egress-proxy lint` (the manifests are checked against the API
schemas separately, by kubernetes-validate).

    .ci/configmap-policies.py OUT      # prints each directory written
"""
import sys
from pathlib import Path

import yaml  # comes with kubernetes-validate

ROOT = Path(__file__).resolve().parent.parent


def main(out):
    for shape in sorted((ROOT / "deploy" / "kubernetes").iterdir()):
        if not shape.is_dir():
            continue
        target = Path(out) / shape.name
        for manifest in sorted(shape.glob("*.yaml")):
            for doc in yaml.safe_load_all(manifest.read_text()):
                if not doc or doc.get("kind") != "ConfigMap":
                    continue
                for name, text in doc.get("data", {}).items():
                    if name.endswith((".toml", ".json")):
                        target.mkdir(parents=True, exist_ok=True)
                        (target / name).write_text(text)
        if target.is_dir():
            print(target)


if __name__ == "__main__":
    main(sys.argv[1])
