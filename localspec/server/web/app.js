// localspec web chat: plain JavaScript, no build step, no network beyond this server.
// Streams /v1/chat/completions; each chunk's `localspec.pieces` says which text the draft guessed
// (shown green), its counters feed the stats line. Conversations and settings live in localStorage.
"use strict";

const $ = (id) => document.getElementById(id);
const KEYS = { chats: "localspec.chats", current: "localspec.current", settings: "localspec.settings" };
const SETTINGS = ["system", "temperature", "top-p", "max-tokens", "gamma", "drafter", "api-key"];

let chats = load(KEYS.chats, []);  // [{id, title, messages: [{role, content, runs?, note?, error?}]}]
let current = localStorage.getItem(KEYS.current);
let running = null;                // {controller, reply} while a generation streams

function load(key, fallback) {
  try { return JSON.parse(localStorage.getItem(key)) ?? fallback; } catch { return fallback; }
}

function save() {
  localStorage.setItem(KEYS.chats, JSON.stringify(chats));
  localStorage.setItem(KEYS.current, current);
}

function currentChat() {
  let chat = chats.find((c) => c.id === current);
  if (!chat) chat = newChat();
  return chat;
}

function newChat() {
  const chat = { id: Date.now().toString(36) + Math.random().toString(36).slice(2, 6), title: "New chat", messages: [] };
  chats.unshift(chat);
  current = chat.id;
  save();
  return chat;
}

// --- settings ---------------------------------------------------------------------------------
function restoreSettings() {
  const saved = load(KEYS.settings, {});
  for (const id of SETTINGS) if (saved[id] !== undefined) $(id).value = saved[id];
  for (const id of SETTINGS) $(id).addEventListener("change", saveSettings);
}

function saveSettings(event) {
  const values = Object.fromEntries(SETTINGS.map((id) => [id, $(id).value]));
  localStorage.setItem(KEYS.settings, JSON.stringify(values));
  if (event && event.target.id === "api-key") showModel();
}

function headers() {
  const key = $("api-key").value.trim();
  return { "Content-Type": "application/json", ...(key ? { Authorization: `Bearer ${key}` } : {}) };
}

// The request: a setting left empty is left out, so that the server's own default (its flags) applies.
function requestBody(messages) {
  const number = (id) => ($(id).value.trim() === "" ? undefined : Number($(id).value));
  const gamma = $("gamma").value.trim();
  return {
    messages, stream: true, temperature: number("temperature"), top_p: number("top-p"),
    max_tokens: number("max-tokens"), drafter: $("drafter").value || undefined,
    gamma: /^\d+$/.test(gamma) ? Number(gamma) : (gamma || undefined),
  };
}

async function showModel() {
  try {
    const resp = await fetch("/v1/models", { headers: headers() });
    if (resp.status === 401) {
      $("model").textContent = "This server needs an API key: enter it under Settings.";
      $("settings").open = true;
      return;
    }
    const card = (await resp.json()).data[0];
    $("model").textContent = `${card.id} · draft: ${card.draft ?? "none (n-gram drafter)"}`;
    for (const option of $("drafter").options) {
      option.disabled = !card.draft && (option.value === "model" || option.value === "hybrid");
    }
  } catch (e) {
    $("model").textContent = `Cannot reach the server (${e.message}).`;
  }
}

// --- rendering ----------------------------------------------------------------------------------
function renderList() {
  const list = $("conversations");
  list.replaceChildren(...chats.map((chat) => {
    const item = document.createElement("li");
    const button = document.createElement("button");
    button.type = "button";
    button.textContent = chat.title;
    button.title = chat.title;
    button.setAttribute("aria-current", String(chat.id === current));
    button.addEventListener("click", () => { stop(); current = chat.id; save(); renderAll(); });
    item.append(button);
    return item;
  }));
}

function messageView(message) {
  const article = document.createElement("article");
  article.className = `msg ${message.role}`;
  const who = document.createElement("p");
  who.className = "who";
  who.textContent = message.role === "user" ? "You" : "Assistant";
  const text = document.createElement("div");
  text.className = "text";
  if (message.runs) {
    for (const [part, draft] of message.runs) text.append(runSpan(part, draft));
  } else {
    text.textContent = message.content;
  }
  const note = document.createElement("p");
  note.className = message.error ? "note error" : "note";
  note.textContent = message.error || message.note || "";
  article.append(who, text, note);
  return article;
}

function runSpan(part, draft) {
  const span = document.createElement("span");
  if (draft) span.className = "draft";
  span.append(document.createTextNode(part));
  return span;
}

function renderAll() {
  const chat = currentChat();
  $("log").replaceChildren(...chat.messages.map(messageView));
  $("log").scrollTop = $("log").scrollHeight;
  renderList();
}

// Append text to a streaming reply: to its last run when the source (draft or not) is the same.
function appendText(reply, view, part, draft) {
  const last = reply.runs[reply.runs.length - 1];
  if (last && last[1] === draft) {
    last[0] += part;
    view.lastChild.firstChild.appendData(part);
  } else {
    reply.runs.push([part, draft]);
    view.append(runSpan(part, draft));
  }
  reply.content += part;
}

const fixed = (x, digits) => (x === null || x === undefined ? "–" : Number(x).toFixed(digits));

function liveStats(ls) {
  const mean = ls.target_tokens ? ls.tokens / ls.target_tokens : null;
  return `${fixed(ls.tokens_per_s, 1)} tok/s · ${ls.draft_tokens}/${ls.tokens} tokens from the draft · ` +
    `mean accepted ≈ ${fixed(mean, 2)} · α at the end · drafter ${ls.drafter} · γ ${ls.gamma}`;
}

function finalStats(chunk) {
  const s = chunk.speculative;
  const finish = chunk.choices[0].finish_reason;
  return `${fixed(s.tokens_per_s, 1)} tok/s · α ${fixed(s.alpha, 2)} · mean accepted ${fixed(s.mean_accepted_length, 2)} · ` +
    `drafter ${s.drafter} · γ ${s.gamma} · ${chunk.usage.completion_tokens} tokens (${finish})`;
}

// --- streaming ------------------------------------------------------------------------------------
async function send(text) {
  const chat = currentChat();
  if (chat.messages.length === 0) chat.title = text.replace(/\s+/g, " ").slice(0, 48);
  chat.messages.push({ role: "user", content: text });
  const history = chat.messages.filter((m) => !m.error).map((m) => ({ role: m.role, content: m.content }));
  const system = $("system").value.trim();
  const messages = system ? [{ role: "system", content: system }, ...history] : history;
  const reply = { role: "assistant", content: "", runs: [] };
  chat.messages.push(reply);
  save();
  renderAll();
  const view = $("log").lastChild.querySelector(".text");
  const note = $("log").lastChild.querySelector(".note");
  running = { controller: new AbortController(), reply };
  setBusy(true);
  $("stats").textContent = "Waiting for the first token…";
  try {
    await stream(requestBody(messages), reply, view, running.controller.signal);
  } catch (e) {
    if (e.name === "AbortError") {
      reply.note = `Stopped. ${$("stats").textContent}`;
    } else {
      reply.error = e.message;
      if (e.status === 401) { $("settings").open = true; $("api-key").focus(); }
    }
  } finally {
    running = null;
    note.className = reply.error ? "note error" : "note";
    note.textContent = reply.error || reply.note || "";
    if (reply.note) $("stats").textContent = reply.note;
    save();
    setBusy(false);
  }
}

async function stream(body, reply, view, signal) {
  const resp = await fetch("/v1/chat/completions", { method: "POST", headers: headers(), body: JSON.stringify(body), signal });
  if (!resp.ok) {
    const err = await resp.json().catch(() => null);
    const e = new Error(err?.error?.message || `HTTP ${resp.status}`);
    e.status = resp.status;
    throw e;
  }
  const reader = resp.body.pipeThrough(new TextDecoderStream()).getReader();
  let buffer = "";
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer += value;
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      for (const line of event.split("\n")) {
        if (line.startsWith("data: ") && line !== "data: [DONE]") handleChunk(JSON.parse(line.slice(6)), reply, view);
      }
    }
  }
}

function handleChunk(chunk, reply, view) {
  if (chunk.error) throw new Error(chunk.error.message);
  const log = $("log");
  const atBottom = log.scrollHeight - log.scrollTop - log.clientHeight < 40;
  const ls = chunk.localspec;
  if (ls) {
    for (const piece of ls.pieces) appendText(reply, view, piece.text, piece.draft);
    $("stats").textContent = liveStats(ls);
  } else {
    const text = chunk.choices?.[0]?.delta?.content;  // a server without the localspec field
    if (text) appendText(reply, view, text, false);
  }
  if (chunk.speculative) {
    reply.note = finalStats(chunk);
    $("stats").textContent = reply.note;
  }
  if (atBottom) log.scrollTop = log.scrollHeight;
}

function setBusy(busy) {
  $("log").setAttribute("aria-busy", String(busy));
  $("stop").disabled = !busy;
  $("send").disabled = busy;
}

function stop() {
  if (running) running.controller.abort();  // closes the connection: the server ends the generation
}

// --- wiring -----------------------------------------------------------------------------------------
function start() {
  restoreSettings();
  $("composer").addEventListener("submit", (event) => {
    event.preventDefault();
    const text = $("message").value.trim();
    if (!text || running) return;
    $("message").value = "";
    send(text);
  });
  $("message").addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      $("composer").requestSubmit();
    }
  });
  $("stop").addEventListener("click", stop);
  $("new-chat").addEventListener("click", () => { stop(); newChat(); renderAll(); $("message").focus(); });
  $("reset-chat").addEventListener("click", () => {
    stop();
    const chat = currentChat();
    chat.messages = [];
    chat.title = "New chat";
    save();
    renderAll();
    $("stats").textContent = "Ready.";
  });
  renderAll();
  showModel();
  $("message").focus();
}

start();
