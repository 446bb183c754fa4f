#!/usr/bin/env python3
"""1,000 constrained generations through the official openai client against `rinfer serve`, every
reply parsed and validated with `jsonschema`: the structured-output check of docs/structured-output.md.

    ./build/default/rinfer serve recipes/llm-serve/smollm2-135m/optimized.yaml --port 8080 &
    .venv-test/bin/python bench/structured_validate.py --base-url http://127.0.0.1:8080/v1 \
        --json bench/results/MACHINE/structured_validate.json

Schemas: nested objects, arrays (bounded), enums (one with escaped quotes and a backslash),
integers and numbers with ranges, strings with escapes, optional fields; sampled at temperature
1.0 with a seed per request, `concurrency` requests in flight. Every 10th request goes through
`client.beta.chat.completions.parse` with a pydantic model instead. Prints a table; exits 1 if
any reply fails to parse or validate.
"""
import argparse
import concurrent.futures
import json
import sys
import time
from typing import Annotated, List, Optional

import jsonschema
import pydantic
from openai import OpenAI

SHORT = {"type": "string", "maxLength": 24}
SCHEMAS = {
    "person": {"type": "object", "properties": {
        "name": SHORT, "age": {"type": "integer", "minimum": 0, "maximum": 120},
        "email": SHORT,
        "address": {"type": "object", "properties": {"city": SHORT, "zip": SHORT},
                    "required": ["city"]}},
        "required": ["name", "age", "address"]},
    "order": {"type": "object", "properties": {
        "id": {"type": "integer", "minimum": 1, "maximum": 99999},
        "items": {"type": "array", "minItems": 1, "maxItems": 3, "items": {
            "type": "object", "properties": {
                "sku": SHORT, "qty": {"type": "integer", "minimum": 1, "maximum": 9},
                "price": {"type": "number", "minimum": 0, "maximum": 1000}},
            "required": ["sku", "qty", "price"]}},
        "status": {"type": "string", "enum": ["new", "paid", "say \"shipped\"", "back\\slash"]},
        "note": {"type": "string", "maxLength": 40}},
        "required": ["id", "items", "status"]},
    "quote": {"type": "object", "properties": {
        "text": {"type": "string", "maxLength": 60},
        "author": SHORT,
        "tags": {"type": "array", "maxItems": 4, "items": {"type": "string", "enum": [
            "wit", "life", "\"quoted\"", "tab\there"]}},
        "score": {"type": "number"}, "verified": {"type": "boolean"}},
        "required": ["text", "author", "verified"]},
    "matrix": {"type": "object", "properties": {
        "rows": {"type": "array", "maxItems": 3, "items": {
            "type": "array", "maxItems": 3, "items": {"type": "integer", "minimum": -9,
                                                      "maximum": 9}}},
        "label": {"type": ["string", "null"], "maxLength": 16}},
        "required": ["rows"]},
}
PROMPTS = {
    "person": "Describe a fictional person as JSON.",
    "order": "Write a shop order as JSON.",
    "quote": "Give a famous quote with its author as JSON.",
    "matrix": "Write a small matrix of integers as JSON.",
}


class City(pydantic.BaseModel):
    name: str = pydantic.Field(max_length=24)
    country: str = pydantic.Field(max_length=24)
    population: int = pydantic.Field(ge=0, le=50_000_000)
    landmarks: List[Annotated[str, pydantic.Field(max_length=24)]] = pydantic.Field(max_length=3)
    nickname: Optional[str] = pydantic.Field(default=None, max_length=24)


def one(client, i, max_tokens):
    """Request i: (kind, ok, finish, error text)."""
    names = list(SCHEMAS)
    if i % 10 == 9:
        try:
            r = client.beta.chat.completions.parse(
                model="", messages=[{"role": "user", "content": "Describe a city as JSON."}],
                response_format=City, temperature=1.0, seed=i, max_tokens=max_tokens)
        except Exception as e:  # noqa: BLE001 (parse() raises on a reply cut at max_tokens)
            return "pydantic City", False, "error", str(e)
        c = r.choices[0]
        ok = c.finish_reason == "stop" and isinstance(c.message.parsed, City)
        return "pydantic City", ok, c.finish_reason, "" if ok else c.message.content
    name = names[i % len(names)]
    r = client.chat.completions.create(
        model="", messages=[{"role": "user", "content": PROMPTS[name]}], temperature=1.0,
        seed=i, max_tokens=max_tokens,
        response_format={"type": "json_schema",
                         "json_schema": {"name": name, "schema": SCHEMAS[name], "strict": True}})
    c = r.choices[0]
    try:
        jsonschema.validate(json.loads(c.message.content), SCHEMAS[name])
        return name, c.finish_reason == "stop", c.finish_reason, ""
    except Exception as e:  # noqa: BLE001 (any failure is reported)
        return name, False, c.finish_reason, f"{e}: {c.message.content!r}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    ap.add_argument("-n", type=int, default=1000)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=400)
    ap.add_argument("--json")
    args = ap.parse_args()
    client = OpenAI(base_url=args.base_url, api_key="none", max_retries=0, timeout=600)
    model = client.models.list().data[0].id
    t0 = time.time()
    with concurrent.futures.ThreadPoolExecutor(args.concurrency) as pool:
        results = list(pool.map(lambda i: one(client, i, args.max_tokens), range(args.n)))
    seconds = time.time() - t0
    kinds = {}
    for kind, ok, finish, err in results:
        k = kinds.setdefault(kind, {"requests": 0, "valid": 0, "finish": {}})
        k["requests"] += 1
        k["valid"] += ok
        k["finish"][finish] = k["finish"].get(finish, 0) + 1
        if not ok:
            print(f"INVALID {kind} ({finish}): {err[:300]}", file=sys.stderr)
    valid = sum(k["valid"] for k in kinds.values())
    print(f"| schema | requests | valid | finish reasons |\n|---|---:|---:|---|")
    for kind, k in kinds.items():
        print(f"| {kind} | {k['requests']} | {k['valid']} | {k['finish']} |")
    print(f"| all | {len(results)} | {valid} | {seconds:.0f} s, {args.concurrency} in flight |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": model, "requests": len(results), "valid": valid,
                       "seconds": round(seconds, 1), "concurrency": args.concurrency,
                       "temperature": 1.0, "by_schema": kinds, "schemas": SCHEMAS}, f, indent=1)
            f.write("\n")
    return 0 if valid == len(results) else 1


if __name__ == "__main__":
    sys.exit(main())
