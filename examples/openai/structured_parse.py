#!/usr/bin/env python3
"""Structured output through the official `openai` client against `rinfer serve`: a pydantic
model through `client.beta.chat.completions.parse` (the client sends its JSON schema as
`response_format`; the server constrains the reply to it, so it always parses).

    ./build/default/rinfer serve recipes/llm-serve/smollm2-135m/optimized.yaml --port 8080
    python3 examples/openai/structured_parse.py --base-url http://127.0.0.1:8080/v1
"""
import argparse
from typing import Annotated, List, Optional

import pydantic
from openai import OpenAI

Name = Annotated[str, pydantic.Field(max_length=40)]  # bounded: a small model cannot run on


class City(pydantic.BaseModel):
    name: Name
    country: Name
    population: int = pydantic.Field(ge=0, le=50_000_000)
    landmarks: List[Name] = pydantic.Field(max_length=3)
    nickname: Optional[Name] = None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    args = ap.parse_args()
    client = OpenAI(base_url=args.base_url, api_key="none")
    r = client.beta.chat.completions.parse(
        model="", messages=[{"role": "user", "content": "Describe Paris as JSON."}],
        response_format=City, temperature=0, max_tokens=200)
    city = r.choices[0].message.parsed
    print(type(city).__name__, city.model_dump_json())


if __name__ == "__main__":
    main()
