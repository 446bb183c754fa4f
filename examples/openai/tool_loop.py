#!/usr/bin/env python3
"""A tool-calling loop through the official `openai` client against `rinfer serve`.

    ./build/default/rinfer serve recipes/llm-chat/qwen2.5-coder-1.5b/optimized.yaml --port 8080
    python3 examples/openai/tool_loop.py --base-url http://127.0.0.1:8080/v1 [--stream]

The model is offered a get_weather function and asked about Paris. It answers with a tool call
(parsed by the server from the model's <tool_call> block into `tool_calls`); this script runs
the function and sends the result back as a `tool` message; the model then replies in words.
The last turn sends tool_choice "none" (tools left out of the prompt): a 1.5B model that still
sees the tools tends to call the function again rather than read its result.
"""
import argparse
import json

from openai import OpenAI

TOOLS = [{
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Get the current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "The city"}},
            "required": ["city"],
        },
    },
}]


def get_weather(city):
    return {"city": city, "temperature_c": 18, "sky": "clear"}  # a stand-in for a weather API


def ask(client, messages, stream, **kwargs):
    """One turn: the assistant message (content, tool_calls) and the finish reason."""
    body = dict(model="", messages=messages, tools=TOOLS, temperature=0, max_tokens=200, **kwargs)
    if not stream:
        r = client.chat.completions.create(**body)
        m = r.choices[0].message
        calls = [c.model_dump(include={"id", "type", "function"}) for c in m.tool_calls or []]
        return m.content, calls, r.choices[0].finish_reason
    content, calls, finish = "", {}, None
    for chunk in client.chat.completions.create(stream=True, **body):
        delta = chunk.choices[0].delta
        finish = chunk.choices[0].finish_reason or finish
        content += delta.content or ""
        for tc in delta.tool_calls or []:  # each call comes whole in one delta here
            c = calls.setdefault(tc.index, {"id": "", "type": "function",
                                            "function": {"name": "", "arguments": ""}})
            c["id"] += tc.id or ""
            c["function"]["name"] += tc.function.name or ""
            c["function"]["arguments"] += tc.function.arguments or ""
    return content or None, list(calls.values()), finish


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", default="http://127.0.0.1:8080/v1")
    ap.add_argument("--stream", action="store_true")
    args = ap.parse_args()
    client = OpenAI(base_url=args.base_url, api_key="none")
    messages = [{"role": "user", "content": "What is the weather like in Paris right now?"}]
    content, calls, finish = ask(client, messages, args.stream)
    print(f"assistant ({finish}): {content!r} calls {json.dumps(calls)}")
    if not calls:
        raise SystemExit("the model did not call a tool")
    messages.append({"role": "assistant", "content": content, "tool_calls": calls})
    for c in calls:
        result = get_weather(**json.loads(c["function"]["arguments"]))
        print(f"tool {c['function']['name']} -> {json.dumps(result)}")
        messages.append({"role": "tool", "tool_call_id": c["id"], "content": json.dumps(result)})
    content, calls, finish = ask(client, messages, args.stream, tool_choice="none")
    print(f"assistant ({finish}): {content}")
    if calls or not content:
        raise SystemExit("the model did not answer in words")


if __name__ == "__main__":
    main()
