// The decide playground: builds an OpenAI Decisions request, posts it to this server, draws the answers.
"use strict";

const KEY_STORAGE = "decide-api-key";
const KIND_LABEL = { predicate: "yes/no", choice: "choice", score: "score" };
const EXAMPLES = {
  predicate: { name: "refund", instructions: "Is this a refund request?", options: [] },
  choice: { name: "team", instructions: "Which team should take it?", options: ["billing", "technical", "sales"] },
  score: { name: "anger", instructions: "How angry is the customer?", options: ["calm", "annoyed", "angry"] },
};

const $ = (id) => document.getElementById(id);
const keyRequired = document.querySelector('meta[name="decide-key-required"]').content === "true";
let servedModel = "decide";
let snippetKind = "curl";

// ------------------------------------------------------------ questions

function addQuestion(type, example = EXAMPLES[type]) {
  const item = $("question-template").content.firstElementChild.cloneNode(true);
  const taken = new Set(questionItems().map((li) => li.querySelector(".name").value));
  let name = example.name;
  for (let i = 2; taken.has(name); i++) name = `${example.name}${i}`;
  item.dataset.type = type;
  item.querySelector(".kind").textContent = KIND_LABEL[type];
  item.querySelector(".name").value = name;
  item.querySelector(".instructions").value = example.instructions;
  const options = item.querySelector(".options");
  options.value = example.options.join("\n");
  options.placeholder = type === "score" ? "levels, low to high, one per line" : "options, one per line";
  item.querySelector(".remove").addEventListener("click", () => {
    item.remove();
    refreshSnippet();
  });
  $("questions").append(item);
  refreshSnippet();
}

function questionItems() {
  return [...$("questions").querySelectorAll(".question")];
}

function readQuestion(item) {
  const type = item.dataset.type;
  const name = item.querySelector(".name").value.trim();
  const instructions = item.querySelector(".instructions").value.trim();
  const options = item.querySelector(".options").value.split("\n").map((s) => s.trim()).filter(Boolean);
  if (!name) throw new Error("every question needs a name");
  if (!instructions) throw new Error(`question ${name}: write the question`);
  if (type === "predicate") return { type, name, instructions };
  if (options.length < 2) throw new Error(`question ${name}: give at least two ${type === "score" ? "levels" : "options"}, one per line`);
  if (type === "choice") return { type, name, instructions, choices: options.map((value) => ({ value })) };
  return { type, name, instructions, levels: options.map((label) => ({ label })) };
}

function buildRequest() {
  const questions = questionItems().map(readQuestion);
  if (!questions.length) throw new Error("add a question: + yes/no, + choice or + score");
  const names = questions.map((q) => q.name);
  const twice = names.find((n, i) => names.indexOf(n) !== i);
  if (twice) throw new Error(`two questions are named ${twice}; give each its own name`);
  return { model: servedModel, input: $("text").value, questions };
}

// ------------------------------------------------------------ submit and draw

function apiKey() {
  return $("api-key").value.trim();
}

async function submit() {
  showError("");
  let body;
  try {
    body = buildRequest();
  } catch (e) {
    return showError(e.message);
  }
  if (keyRequired && !apiKey()) {
    $("api-key").focus();
    return showError("This server needs an API key: enter its DECIDE_API_KEY above.");
  }
  const headers = { "Content-Type": "application/json" };
  if (apiKey()) headers.Authorization = `Bearer ${apiKey()}`;
  $("submit").disabled = true;
  const started = performance.now();
  try {
    const response = await fetch("/v1/decisions", { method: "POST", headers, body: JSON.stringify(body) });
    const ms = performance.now() - started;
    const data = await response.json().catch(() => ({}));
    if (!response.ok) {
      $("answers").replaceChildren();
      $("usage").textContent = "";
      return showError(errorText(response.status, data));
    }
    drawAnswers(data, body.questions, ms);
  } catch (e) {
    showError(`Could not reach the server (${e.message}). Is it still running?`);
  } finally {
    $("submit").disabled = false;
  }
}

function errorText(status, data) {
  const message = (data.error && data.error.message) || (data.detail && data.detail.message) || "";
  if (status === 401) {
    $("key-box").hidden = false;
    $("api-key").focus();
    return apiKey()
      ? "The server did not accept this API key (401): check DECIDE_API_KEY and enter it again."
      : "This server needs an API key (401): enter its DECIDE_API_KEY above.";
  }
  if (status === 429 || status === 503) return `The server is busy or still loading its model (${status}): try again in a moment. ${message}`;
  return `The server refused the request (${status}): ${message || "no details"}`;
}

function showError(text) {
  $("error").textContent = text;
  $("error").hidden = !text;
}

function rowsOf(answer) {
  if (answer.type === "predicate") return [["yes", answer.probability], ["no", 1 - answer.probability]];
  return answer.probabilities.map((p) => [answer.type === "score" ? p.label : String(p.value), p.probability]);
}

function headline(answer) {
  if (answer.type === "predicate") return `P(yes) = ${answer.probability.toFixed(3)}`;
  const confidence = `confidence ${answer.confidence.toFixed(2)}`;
  if (answer.type === "choice") return `${answer.choice} · ${confidence}`;
  return `score ${answer.score.toFixed(2)} of 0–${answer.probabilities.length - 1} · ${confidence}`;
}

function drawAnswers(data, questions, ms) {
  const box = $("answers");
  box.replaceChildren();
  data.answers.forEach((answer, i) => {
    const div = element("div", "answer");
    div.dataset.name = questions[i].name;
    const title = element("h3");
    title.append(element("span", "name", `${questions[i].name} (${KIND_LABEL[answer.type]})`));
    title.append(element("span", "headline", headline(answer)));
    div.append(title);
    const rows = rowsOf(answer);
    const best = Math.max(...rows.map(([, p]) => p));
    for (const [label, p] of rows) div.append(barRow(label, p, p === best));
    box.append(div);
  });
  const u = data.usage;
  const cached = u.input_tokens_details ? u.input_tokens_details.cached_tokens : 0;
  $("usage").textContent = `${u.input_tokens} input tokens (${cached} cached) · ${Math.round(ms)} ms · model ${data.model}`;
}

function barRow(label, p, best) {
  const row = element("div", best ? "bar-row best" : "bar-row");
  row.append(element("span", "label", label));
  const track = element("span", "track");
  const fill = element("span", "fill");
  fill.style.display = "block";
  fill.style.width = `${(100 * p).toFixed(2)}%`;
  track.append(fill);
  row.append(track);
  const value = element("span", "p", `${(100 * p).toFixed(1)}%`);
  value.title = String(p);
  row.append(value);
  row.firstChild.title = label;
  return row;
}

function element(tag, className = "", text = "") {
  const el = document.createElement(tag);
  if (className) el.className = className;
  if (text) el.textContent = text;
  return el;
}

// ------------------------------------------------------------ copy as code

function python(value, indent = 0) {
  const flat = pythonFlat(value);
  if (flat.length + 4 * indent < 88 || value === null || typeof value !== "object") return flat;
  const pad = "    ".repeat(indent + 1);
  const end = "    ".repeat(indent);
  const items = Array.isArray(value)
    ? value.map((x) => `${pad}${python(x, indent + 1)},\n`)
    : Object.entries(value).map(([k, v]) => `${pad}${JSON.stringify(k)}: ${python(v, indent + 1)},\n`);
  const [open, close] = Array.isArray(value) ? ["[", "]"] : ["{", "}"];
  return `${open}\n${items.join("")}${end}${close}`;
}

function pythonFlat(value) {
  if (value === null) return "None";
  if (value === true) return "True";
  if (value === false) return "False";
  if (typeof value !== "object") return JSON.stringify(value);
  if (Array.isArray(value)) return `[${value.map(pythonFlat).join(", ")}]`;
  return `{${Object.entries(value).map(([k, v]) => `${JSON.stringify(k)}: ${pythonFlat(v)}`).join(", ")}}`;
}

function shellQuote(text) {
  return `'${text.replace(/'/g, "'\\''")}'`;
}

const keyExpression = () => (keyRequired ? 'os.environ["DECIDE_API_KEY"]' : '"none"');
const osImport = () => (keyRequired ? ["import os", ""] : []);

function curlSnippet(body) {
  const auth = keyRequired ? '  -H "Authorization: Bearer $DECIDE_API_KEY" \\\n' : "";
  return (
    `curl -sS ${location.origin}/v1/decisions \\\n` +
    '  -H "Content-Type: application/json" \\\n' +
    auth +
    `  -d ${shellQuote(JSON.stringify(body, null, 2))}`
  );
}

function openaiSnippet(body) {
  return [
    ...osImport(),
    "from openai import OpenAI",
    "",
    `client = OpenAI(base_url="${location.origin}/v1", api_key=${keyExpression()})`,
    "decision = client.decisions.create(",
    `    model=${python(body.model, 1)},`,
    `    input=${python(body.input, 1)},`,
    `    questions=${python(body.questions, 1)},`,
    ")",
    "for answer in decision.answers:",
    "    print(answer.to_json(indent=None))",
    "print(decision.usage.to_json(indent=None))",
  ].join("\n");
}

const SDK_CLASS = { predicate: "Noul", choice: "Choice", score: "Score" };

function typesafeQuestion(q) {
  const instructions = `instructions=${python(q.instructions, 2)}`;
  if (q.type === "predicate") return `Noul(${instructions})`;
  if (q.type === "choice") {
    const criteria = Object.fromEntries(q.choices.map((c) => [c.value, null]));
    return `Choice(${instructions}, criteria=${python(criteria, 2)})`;
  }
  return `Score(${instructions}, criteria=${python(q.levels.map((l) => l.label), 2)})`;
}

function typesafeSnippet(body) {
  const classes = [...new Set(body.questions.map((q) => SDK_CLASS[q.type]))].sort();
  return [
    ...osImport(),
    `from typesafe_sdk import ${[...classes, "TypeSafeClient"].join(", ")}`,
    "",
    `with TypeSafeClient(api_key=${keyExpression()}, base_url="${location.origin}", timeout=120) as client:`,
    "    response = client.system_one(",
    `        state=${python(body.input, 2)},`,
    "        questions={",
    ...body.questions.map((q) => `            ${JSON.stringify(q.name)}: ${typesafeQuestion(q)},`),
    "        },",
    `        model=${python(body.model, 2)},`,
    "    )",
    "for name, answer in response.answers.items():",
    "    print(name, answer.model_dump_json())",
  ].join("\n");
}

const SNIPPETS = { curl: curlSnippet, openai: openaiSnippet, typesafe: typesafeSnippet };

function refreshSnippet() {
  let text;
  try {
    text = SNIPPETS[snippetKind](buildRequest());
  } catch (e) {
    text = `# ${e.message}`;
  }
  $("snippet").textContent = text;
  for (const tab of document.querySelectorAll("[data-snippet]")) tab.classList.toggle("active", tab.dataset.snippet === snippetKind);
}

async function copySnippet() {
  const text = $("snippet").textContent;
  try {
    await navigator.clipboard.writeText(text);
    flash("Copied");
  } catch {
    const range = document.createRange();
    range.selectNodeContents($("snippet"));
    getSelection().removeAllRanges();
    getSelection().addRange(range);
    flash("Selected: press Ctrl+C");
  }
}

function flash(text) {
  $("copy").textContent = text;
  setTimeout(() => ($("copy").textContent = "Copy"), 1500);
}

// ------------------------------------------------------------ server status

async function pollHealth() {
  let wait = 1000;
  try {
    const health = await (await fetch("/health")).json();
    if (health.status === "ok") {
      servedModel = health.model;
      $("status").textContent = `model ${health.model}`;
      $("status").className = "status ok";
      refreshSnippet();
      return;
    }
    const progress = health.progress && health.progress.fraction != null ? ` ${Math.round(100 * health.progress.fraction)}%` : "";
    $("status").textContent = health.status === "failed" ? `the model failed to load: ${health.error}` : `loading the model…${progress}`;
    if (health.status === "failed") return;
  } catch {
    $("status").textContent = "the server does not answer";
    wait = 3000;
  }
  setTimeout(pollHealth, wait);
}

// ------------------------------------------------------------ start

function start() {
  $("key-box").hidden = !keyRequired;
  $("api-key").value = sessionStorage.getItem(KEY_STORAGE) || "";
  $("api-key").addEventListener("input", () => sessionStorage.setItem(KEY_STORAGE, apiKey()));
  for (const button of document.querySelectorAll("[data-add]")) button.addEventListener("click", () => addQuestion(button.dataset.add));
  for (const tab of document.querySelectorAll("[data-snippet]")) {
    tab.addEventListener("click", () => {
      snippetKind = tab.dataset.snippet;
      refreshSnippet();
    });
  }
  $("copy").addEventListener("click", copySnippet);
  $("submit").addEventListener("click", submit);
  $("questions").addEventListener("input", refreshSnippet);
  $("text").addEventListener("input", refreshSnippet);
  for (const type of ["predicate", "choice", "score"]) addQuestion(type);
  pollHealth();
}

start();
