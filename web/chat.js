// The chat page: multi-turn history kept here, each reply streamed from
// POST /v1/chat/completions (server-sent events), a stop button that aborts the request (the
// server frees its KV blocks), and the tokens/s of each reply from the usage the stream ends with.
"use strict";

const $ = (id) => document.getElementById(id);
const turns = [];  // the conversation: {role, content}
let controller = null;

function headers() {
  const h = { "Content-Type": "application/json" };
  const key = $("api-key").value.trim();
  if (key) h["Authorization"] = "Bearer " + key;
  return h;
}

function addMessage(role, text) {
  const div = document.createElement("div");
  div.className = "msg " + role;
  div.dataset.role = role;
  const body = document.createElement("span");
  body.className = "text";
  body.textContent = text;
  div.appendChild(body);
  $("log").appendChild(div);
  $("log").scrollTop = $("log").scrollHeight;
  return div;
}

function setMeta(div, text) {
  let meta = div.querySelector(".meta");
  if (!meta) {
    meta = document.createElement("span");
    meta.className = "meta";
    div.appendChild(meta);
  }
  meta.textContent = text;
}

async function loadModels() {
  try {
    const r = await fetch("/v1/models", { headers: headers() });
    const j = await r.json();
    if (!r.ok) throw new Error(j.error ? j.error.message : r.statusText);
    const sel = $("model");
    sel.innerHTML = "";
    for (const m of j.data) {
      const o = document.createElement("option");
      o.value = o.textContent = m.id;
      sel.appendChild(o);
    }
    $("status").textContent = j.data.length ? "ready" : "no model is served";
  } catch (e) {
    $("status").textContent = "cannot list the models: " + e.message;
  }
}

// Reads server-sent events from a fetch body, calling onData with each JSON payload.
async function readEvents(body, onData) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf("\n\n")) >= 0) {
      const event = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      for (const line of event.split("\n")) {
        if (!line.startsWith("data: ")) continue;
        const data = line.slice(6);
        if (data === "[DONE]") return;
        onData(JSON.parse(data));
      }
    }
  }
}

async function send(text) {
  turns.push({ role: "user", content: text });
  addMessage("user", text);
  const div = addMessage("assistant", "");
  div.dataset.state = "streaming";
  const out = div.querySelector(".text");
  controller = new AbortController();
  $("send").disabled = true;
  $("stop").disabled = false;
  $("status").textContent = "generating...";
  const started = performance.now();
  let first = 0, usage = null, finish = null, reply = "";
  try {
    const r = await fetch("/v1/chat/completions", {
      method: "POST",
      headers: headers(),
      signal: controller.signal,
      body: JSON.stringify({
        model: $("model").value,
        messages: turns,
        stream: true,
        stream_options: { include_usage: true },
        temperature: Number($("temperature").value),
        max_tokens: Number($("max-tokens").value),
      }),
    });
    if (!r.ok) {
      const j = await r.json().catch(() => ({}));
      throw new Error(j.error ? j.error.message : r.status + " " + r.statusText);
    }
    await readEvents(r.body, (chunk) => {
      if (chunk.error) throw new Error(chunk.error.message);
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices || []) {
        if (c.delta && c.delta.content) {
          if (!first) first = performance.now();
          reply += c.delta.content;
          out.textContent = reply;
          $("log").scrollTop = $("log").scrollHeight;
        }
        if (c.finish_reason) finish = c.finish_reason;
      }
    });
    turns.push({ role: "assistant", content: reply });
    const secs = (performance.now() - (first || started)) / 1000;
    const n = usage ? usage.completion_tokens : 0;
    const rate = n > 1 && secs > 0 ? ((n - 1) / secs).toFixed(1) : "-";
    setMeta(div, `${n} tokens, ${rate} tokens/s, finish: ${finish}`);
    div.dataset.state = "done";
    $("status").textContent = "ready";
  } catch (e) {
    if (e.name === "AbortError") {
      turns.push({ role: "assistant", content: reply });
      setMeta(div, "stopped");
      div.dataset.state = "stopped";
      $("status").textContent = "stopped";
    } else {
      div.classList.add("error");
      setMeta(div, "error: " + e.message);
      div.dataset.state = "error";
      turns.pop();  // the user's turn is not part of the conversation
      $("status").textContent = "error";
    }
  } finally {
    controller = null;
    $("send").disabled = false;
    $("stop").disabled = true;
  }
}

$("composer").addEventListener("submit", (ev) => {
  ev.preventDefault();
  const text = $("input").value.trim();
  if (!text || controller) return;
  $("input").value = "";
  send(text);
});
$("input").addEventListener("keydown", (ev) => {
  if (ev.key === "Enter" && !ev.shiftKey) {
    ev.preventDefault();
    $("composer").requestSubmit();
  }
});
$("stop").addEventListener("click", () => controller && controller.abort());
$("new-chat").addEventListener("click", () => {
  if (controller) controller.abort();
  turns.length = 0;
  $("log").innerHTML = "";
});
$("api-key").addEventListener("change", loadModels);
loadModels();
