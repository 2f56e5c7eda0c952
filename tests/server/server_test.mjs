// server_test.mjs — `lacuna serve` on 127.0.0.1 (a free port) driven by OpenAI's own Node
// client: plain chat, streaming (deltas join to the non-streamed answer), response_format
// json_schema, tools (auto / required / named), greedy parity with `lacuna run` and `lacuna
// chat` alone and with 7 other requests in the batch, bad requests (status and error shape),
// a concurrent load, a disconnecting client, a queue flood (503, then recovery) and SIGTERM.
// Usage: node server_test.mjs LACUNA MODEL
import assert from 'node:assert/strict';
import { spawn, execFile } from 'node:child_process';
import { writeFileSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import OpenAI from 'openai';

const [lacuna, model] = process.argv.slice(2);
const API_KEY = 'test-key';
const PARALLEL = 8;
const QUEUE = 16;  // parallel + queue > the 16 load clients: a finished job frees its slot a step later
const started = Date.now();
let failures = 0;

function log(...a) { console.log(`[${((Date.now() - started) / 1000).toFixed(1)}s]`, ...a); }

async function check(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    failures++;
    log(`FAIL ${name}: ${e && e.stack ? e.stack : e}`);
  }
}

// ---- the server ------------------------------------------------------------------------

function startServer(args) {
  const proc = spawn(lacuna, ['serve', '-m', model, '--port', '0', '--threads', '2', ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: { ...process.env, OMP_WAIT_POLICY: 'passive' },
  });
  let err = '';
  proc.stderr.on('data', (d) => { err += d; });
  return new Promise((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`server did not start: ${out}${err}`)), 30000);
    proc.stdout.on('data', (d) => {
      out += d;
      const m = out.match(/listening on (http:\/\/[0-9.]+:\d+)/);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, url: m[1], stderr: () => err, stdout: () => out });
      }
    });
    proc.on('exit', (code) => reject(new Error(`server exited with ${code}: ${out}${err}`)));
  });
}

function run(cmd, args) {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { encoding: 'buffer', maxBuffer: 1 << 24,
                          env: { ...process.env, OMP_WAIT_POLICY: 'passive' } },
             (e, stdout, stderr) => {
               if (e) reject(new Error(`${cmd} ${args.join(' ')}: ${e.message} ${stderr}`));
               else resolve(stdout);
             });
  });
}

// Invalid UTF-8 (random weights emit any bytes) becomes U+FFFD; decoders may differ in how
// many they write for one bad sequence.
const norm = (s) => s.replace(/\uFFFD+/g, '\uFFFD');

// ---- schemas and checks ----------------------------------------------------------------

const personSchema = {
  type: 'object',
  properties: {
    name: { type: 'string', maxLength: 12 },
    age: { type: 'integer', minimum: 0, maximum: 150 },
    tags: { type: 'array', items: { type: 'string', enum: ['a', 'b', 'c'] }, maxItems: 3 },
  },
  required: ['name', 'age'],
  additionalProperties: false,
};

function validPerson(text) {
  const v = JSON.parse(text);
  assert.equal(typeof v, 'object');
  assert.deepEqual(Object.keys(v).filter((k) => !['name', 'age', 'tags'].includes(k)), []);
  assert.equal(typeof v.name, 'string');
  assert.ok([...v.name].length <= 12, `name ${v.name}`);
  assert.ok(Number.isInteger(v.age) && v.age >= 0 && v.age <= 150, `age ${v.age}`);
  if (v.tags !== undefined) {
    assert.ok(Array.isArray(v.tags) && v.tags.length <= 3);
    for (const t of v.tags) assert.ok(['a', 'b', 'c'].includes(t));
  }
}

const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Weather of a city',
      parameters: {
        type: 'object',
        properties: { city: { type: 'string', maxLength: 16 }, unit: { type: 'string', enum: ['c', 'f'] } },
        required: ['city'],
        additionalProperties: false,
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'add',
      description: 'Adds two integers',
      parameters: {
        type: 'object',
        properties: { a: { type: 'integer', minimum: -1000, maximum: 1000 }, b: { type: 'integer', minimum: -1000, maximum: 1000 } },
        required: ['a', 'b'],
        additionalProperties: false,
      },
    },
  },
];

function validCall(call, only) {
  assert.equal(call.type, 'function');
  assert.ok(typeof call.id === 'string' && call.id.length > 0);
  const names = only ? [only] : ['get_weather', 'add'];
  assert.ok(names.includes(call.function.name), `tool ${call.function.name}`);
  const args = JSON.parse(call.function.arguments);
  if (call.function.name === 'get_weather') {
    assert.equal(typeof args.city, 'string');
    assert.ok([...args.city].length <= 16);
    if (args.unit !== undefined) assert.ok(['c', 'f'].includes(args.unit));
    assert.deepEqual(Object.keys(args).filter((k) => !['city', 'unit'].includes(k)), []);
  } else {
    assert.ok(Number.isInteger(args.a) && Number.isInteger(args.b));
    assert.ok(Math.abs(args.a) <= 1000 && Math.abs(args.b) <= 1000);
    assert.deepEqual(Object.keys(args).sort(), ['a', 'b']);
  }
}

async function rawPost(url, path, body, headers = {}) {
  const res = await fetch(url + path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${API_KEY}`, ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
  const text = await res.text();
  let json = null;
  try { json = JSON.parse(text); } catch { /* not JSON */ }
  return { status: res.status, json, text, headers: res.headers };
}

function errorShape(r, status, param) {
  assert.equal(r.status, status, `status ${r.status}: ${r.text}`);
  assert.ok(r.json && r.json.error, `no error object: ${r.text}`);
  const e = r.json.error;
  assert.equal(typeof e.message, 'string');
  assert.ok(e.message.length > 0);
  assert.equal(typeof e.type, 'string');
  assert.ok('param' in e && 'code' in e);
  if (param !== undefined) assert.ok(e.param && e.param.startsWith(param), `param ${e.param}`);
}

// ---- the tests -------------------------------------------------------------------------

const persistDir = mkdtempSync(join(tmpdir(), 'lacuna-serve-kv-'));
const serverArgs = ['--parallel', String(PARALLEL), '--queue', String(QUEUE),
                                  '--ctx', '8192', '--api-key', API_KEY, '--max-body', '200000',
                    '--http-threads', '64', '--persist-dir', persistDir];
const server = await startServer(serverArgs);
log(`server at ${server.url}`);
const client = new OpenAI({ apiKey: API_KEY, baseURL: `${server.url}/v1`, maxRetries: 0, timeout: 60000 });
const user = (content) => [{ role: 'user', content }];

// The sampled comparisons first, on a server that holds no kept branch yet: a sampled token
// can flip where the same prompt's KV lies in other cells (float rounding, docs/server.md),
// and kept branches from the concurrent tests below leave the cells in a timing-dependent
// layout. cache_prompt false keeps these from leaving branches of their own.
await check('streaming with a seed (temperature 0.9): deltas join to the non-streamed answer', async () => {
  // cache_prompt false: both decode the whole prompt (a prompt decoded in another split, or
  // into other KV cells, can round differently and flip a sampled token; docs/server.md).
  const req = { model: 'tiny', messages: user('Tell me a story'), max_tokens: 40, temperature: 0.9, seed: 1234,
                cache_prompt: false };
  const full = await client.chat.completions.create(req);
  let text = '';
  for await (const chunk of await client.chat.completions.create({ ...req, stream: true })) {
    for (const ch of chunk.choices) if (ch.delta && ch.delta.content) text += ch.delta.content;
  }
  assert.equal(text, full.choices[0].message.content);
});

await check('n = 3: three choices (seeds seed, seed + 1, seed + 2), streamed by index equal to the non-streamed', async () => {
  const req = { model: 'tiny', messages: user('Tell me a story'), max_tokens: 32, temperature: 0.9, seed: 21,
                cache_prompt: false };  // as in the test above
  const singles = [];
  for (const seed of [21, 22, 23]) singles.push(await client.chat.completions.create({ ...req, seed }));
  const three = await client.chat.completions.create({ ...req, n: 3 });
  assert.deepEqual(three.choices.map((c) => c.index), [0, 1, 2]);
  // Choice i is the n = 1 answer with seed + i.
  const texts = three.choices.map((c) => c.message.content);
  assert.deepEqual(texts, singles.map((r) => r.choices[0].message.content));
  assert.ok(new Set(texts).size > 1, `three equal choices: ${JSON.stringify(texts)}`);
  assert.equal(three.usage.prompt_tokens, singles[0].usage.prompt_tokens);
  assert.equal(three.usage.completion_tokens, singles.reduce((a, r) => a + r.usage.completion_tokens, 0));
  const streamed = ['', '', ''];
  const finishes = [null, null, null];
  let usage = null;
  for await (const chunk of await client.chat.completions.create({ ...req, n: 3, stream: true, stream_options: { include_usage: true } })) {
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) {
      if (ch.delta && ch.delta.content) streamed[ch.index] += ch.delta.content;
      if (ch.finish_reason) finishes[ch.index] = ch.finish_reason;
    }
  }
  assert.deepEqual(streamed, texts);
  assert.deepEqual(finishes, three.choices.map((c) => c.finish_reason));
  assert.equal(usage.completion_tokens, three.usage.completion_tokens);
  // Completions too, the constraint forked for every choice.
  const c = await rawPost(server.url, '/v1/completions', { prompt: 'Answer:', n: 2, max_tokens: 4, temperature: 0.8, seed: 3,
                                                            grammar: 'root ::= "yes" | "no" | "maybe"' });
  assert.equal(c.status, 200, c.text);
  assert.equal(c.json.choices.length, 2);
  for (const ch of c.json.choices) assert.ok(['yes', 'no', 'maybe'].includes(ch.text), c.text);
});

let plain;
await check('plain chat (greedy): content, usage, timings', async () => {
  plain = await client.chat.completions.create({
    model: 'tiny', messages: user('Hello there'), max_tokens: 24, temperature: 0,
  });
  assert.equal(plain.object, 'chat.completion');
  assert.equal(plain.choices.length, 1);
  const c = plain.choices[0];
  assert.equal(c.message.role, 'assistant');
  assert.equal(typeof c.message.content, 'string');
  assert.ok(['stop', 'length'].includes(c.finish_reason));
  assert.ok(plain.usage.prompt_tokens > 0);
  assert.ok(plain.usage.completion_tokens > 0 && plain.usage.completion_tokens <= 24);
  assert.equal(plain.usage.total_tokens, plain.usage.prompt_tokens + plain.usage.completion_tokens);
  assert.equal(typeof plain.usage.prompt_tokens_details.cached_tokens, 'number');
  assert.ok(plain.timings && plain.timings.forward_passes >= 0);
});

await check('streaming chat: deltas join to the non-streamed answer, usage chunk, [DONE]', async () => {
  const stream = await client.chat.completions.create({
    model: 'tiny', messages: user('Hello there'), max_tokens: 24, temperature: 0, stream: true,
    stream_options: { include_usage: true },
  });
  let text = '';
  let finish = null;
  let usage = null;
  let chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const ch of chunk.choices) {
      if (ch.delta && ch.delta.content) text += ch.delta.content;
      if (ch.finish_reason) finish = ch.finish_reason;
    }
  }
  assert.ok(chunks >= 2);
  assert.equal(text, plain.choices[0].message.content);
  assert.equal(finish, plain.choices[0].finish_reason);
  assert.ok(usage && usage.completion_tokens === plain.usage.completion_tokens);
});

await check('completions: greedy text equals `lacuna run`, streamed deltas join to it', async () => {
  const prompt = 'Once upon a time';
  const r = await client.completions.create({ model: 'tiny', prompt, max_tokens: 20, temperature: 0 });
  const cli = await run(lacuna, ['run', '-m', model, '-p', prompt, '-n', '20', '--threads', '2']);
  const cliText = new TextDecoder().decode(cli).replace(/\n$/, '');
  assert.equal(norm(r.choices[0].text), norm(cliText));
  let text = '';
  for await (const chunk of await client.completions.create({ model: 'tiny', prompt, max_tokens: 20, temperature: 0, stream: true })) {
    for (const ch of chunk.choices) text += ch.text;
  }
  assert.equal(text, r.choices[0].text);
});

await check(`greedy parity with \`lacuna chat\`, alone and with ${PARALLEL - 1} other requests in the batch`, async () => {
  const dir = mkdtempSync(join(tmpdir(), 'lacuna-serve-'));
  const messages = user('What is the capital of France?');
  writeFileSync(join(dir, 'm.json'), JSON.stringify(messages));
  const cli = JSON.parse(new TextDecoder().decode(
    await run(lacuna, ['chat', '-m', model, '--messages', join(dir, 'm.json'), '-n', '32', '--json', '--threads', '2'])));
  rmSync(dir, { recursive: true, force: true });
  const alone = await client.chat.completions.create({ model: 'tiny', messages, max_tokens: 32, temperature: 0 });
  assert.equal(alone.choices[0].message.content, cli.content);
  // The same request among 7 others (different prompts, lengths, schemas) in one batch.
  const others = [];
  for (let i = 0; i < PARALLEL - 1; i++) {
    const extra = i % 2 === 0 ? { response_format: { type: 'json_schema', json_schema: { name: 'p', schema: personSchema } } } : {};
    others.push(client.chat.completions.create({
      model: 'tiny', messages: user(`Other request number ${i} `.repeat(i + 1)), max_tokens: 40 + i * 4,
      temperature: i % 3 === 0 ? 0 : 0.8, seed: i, ...extra,
    }));
  }
  const batched = client.chat.completions.create({ model: 'tiny', messages, max_tokens: 32, temperature: 0 });
  const [b] = await Promise.all([batched, ...others]);
  assert.equal(b.choices[0].message.content, cli.content);
});

await check('response_format json_schema: every answer parses and validates (greedy and 3 seeds)', async () => {
  for (const [temperature, seed] of [[0, 0], [0.8, 1], [0.8, 2], [1.0, 3]]) {
    const r = await client.chat.completions.create({
      model: 'tiny', messages: user('Describe a person as JSON'), max_tokens: 120, temperature, seed,
      response_format: { type: 'json_schema', json_schema: { name: 'person', schema: personSchema, strict: true } },
    });
    assert.equal(r.choices[0].finish_reason, 'stop', JSON.stringify(r.choices[0]));
    validPerson(r.choices[0].message.content);
  }
  const o = await client.chat.completions.create({
    model: 'tiny', messages: user('Any JSON object'), max_tokens: 200, temperature: 0,
    response_format: { type: 'json_object' },
  });
  if (o.choices[0].finish_reason === 'stop') {
    const v = JSON.parse(o.choices[0].message.content);
    assert.ok(v && typeof v === 'object' && !Array.isArray(v));
  }
});

await check('lacuna extensions: choices, regex, grammar, token_trie', async () => {
  const c = await rawPost(server.url, '/v1/chat/completions', {
    messages: user('Pick one'), choices: ['red', 'green', 'blue'], temperature: 0.7, seed: 5, max_tokens: 8,
  });
  assert.equal(c.status, 200, c.text);
  assert.ok(['red', 'green', 'blue'].includes(c.json.choices[0].message.content), c.text);
  const r = await rawPost(server.url, '/v1/completions', {
    prompt: 'Phone:', regex: '[0-9]{3}-[0-9]{4}', temperature: 0, max_tokens: 16,
  });
  assert.equal(r.status, 200, r.text);
  assert.match(r.json.choices[0].text, /^[0-9]{3}-[0-9]{4}$/);
  const g = await rawPost(server.url, '/v1/completions', {
    prompt: 'Answer:', grammar: 'root ::= "yes" | "no"', temperature: 0, max_tokens: 4,
  });
  assert.equal(g.status, 200, g.text);
  assert.ok(['yes', 'no'].includes(g.json.choices[0].text), g.text);
  // A token trie: the answer is one of its leaves, token for token (ids from /tokenize).
  const ids = async (text) => (await rawPost(server.url, '/tokenize', { content: text })).json.tokens;
  const leaves = [' red', ' green light', ' blue sky today'];
  const payload = { modelId: 'tiny', descriptors: [{ path: 'color', leaves: await Promise.all(
    leaves.map(async (l, i) => ({ name: `leaf${i}`, tokens: await ids(l) }))) }] };
  for (const seed of [1, 2, 3, 4]) {
    const t = await rawPost(server.url, '/v1/completions', {
      prompt: 'Color:', token_trie: payload, token_trie_path: 'color', temperature: 1, seed, max_tokens: 8,
    });
    assert.equal(t.status, 200, t.text);
    assert.ok(leaves.includes(t.json.choices[0].text), t.text);
  }
});

await check('logprobs: one record per token, bytes join to the answer, greedy picks the top one, streamed equal to non-streamed', async () => {
  const body = { model: 'tiny', messages: user('Hello there'), max_tokens: 12, temperature: 0 };
  const base = await client.chat.completions.create(body);
  const lp = await client.chat.completions.create({ ...body, logprobs: true, top_logprobs: 3 });
  // Every token sampled from logits (no skipping): the same greedy answer.
  assert.equal(lp.choices[0].message.content, base.choices[0].message.content);
  const content = lp.choices[0].logprobs.content;
  assert.equal(content.length, lp.usage.completion_tokens);
  const joined = Buffer.from(content.flatMap((r) => r.bytes)).toString('utf8');
  assert.ok(joined.startsWith(lp.choices[0].message.content), joined);
  for (const r of content) {
    assert.ok(r.logprob <= 0 && r.top_logprobs.length === 3, JSON.stringify(r));
    assert.equal(r.top_logprobs[0].logprob, r.logprob);  // greedy, no constraint: the best one
    assert.ok(r.top_logprobs[0].logprob >= r.top_logprobs[1].logprob);
  }
  const stream = await client.chat.completions.create({ ...body, logprobs: true, top_logprobs: 3, stream: true });
  const streamed = [];
  for await (const chunk of stream) {
    for (const ch of chunk.choices) if (ch.logprobs && ch.logprobs.content) streamed.push(...ch.logprobs.content);
  }
  assert.deepEqual(streamed, content);
  // A schema: forced tokens too get their record (one per completion token).
  const js = await client.chat.completions.create({
    ...body, max_tokens: 96, logprobs: true,
    response_format: { type: 'json_schema', json_schema: { name: 'person', schema: personSchema } },
  });
  assert.equal(js.choices[0].logprobs.content.length, js.usage.completion_tokens);
  // Legacy completions: `logprobs` N gives tokens, token_logprobs, top_logprobs, text_offset.
  const c = await rawPost(server.url, '/v1/completions', { prompt: 'Hello', max_tokens: 6, temperature: 0, logprobs: 2 });
  assert.equal(c.status, 200, c.text);
  const l = c.json.choices[0].logprobs;
  assert.equal(l.tokens.length, c.json.usage.completion_tokens);
  assert.equal(l.token_logprobs.length, l.tokens.length);
  assert.equal(l.text_offset[0], 0);
  assert.ok(l.top_logprobs.every((t) => Object.keys(t).length >= 1 && Object.keys(t).length <= 2));
  errorShape(await rawPost(server.url, '/v1/chat/completions', { messages: user('x'), top_logprobs: 2 }), 400, 'top_logprobs');
  errorShape(await rawPost(server.url, '/v1/chat/completions', { messages: user('x'), logprobs: true, top_logprobs: 21 }), 400, 'top_logprobs');
});

await check('tools: required, named and auto; every call parses and validates', async () => {
  for (const seed of [0, 1, 2]) {
    const temperature = seed === 0 ? 0 : 0.9;
    const req = await client.chat.completions.create({
      model: 'tiny', messages: user('What is the weather in Paris?'), tools, tool_choice: 'required',
      max_tokens: 120, temperature, seed,
    });
    const m = req.choices[0].message;
    assert.equal(req.choices[0].finish_reason, 'tool_calls', JSON.stringify(req.choices[0]));
    assert.equal(m.tool_calls.length, 1);
    m.tool_calls.forEach((c) => validCall(c));
    const named = await client.chat.completions.create({
      model: 'tiny', messages: user('Add 2 and 3'), tools,
      tool_choice: { type: 'function', function: { name: 'add' } }, max_tokens: 120, temperature, seed,
    });
    assert.equal(named.choices[0].message.tool_calls.length, 1);
    validCall(named.choices[0].message.tool_calls[0], 'add');
    const auto = await client.chat.completions.create({
      model: 'tiny', messages: user('Hi'), tools, tool_choice: 'auto', max_tokens: 60, temperature, seed,
    });
    for (const c of auto.choices[0].message.tool_calls || []) validCall(c);
  }
});

await check('tools streamed (required, auto, parallel): content and calls by index equal the non-streamed answer', async () => {
  const cases = [
    { tool_choice: 'required', seed: 7 },
    { tool_choice: 'required', parallel_tool_calls: true, seed: 8 },
    { tool_choice: 'auto', seed: 1 },
    { tool_choice: 'auto', seed: 2 },
  ];
  for (const extra of cases) {
    const req = { model: 'tiny', messages: user('Weather in Oslo?'), tools, max_tokens: 120, temperature: 0.9, ...extra };
    const full = await client.chat.completions.create(req);
    const calls = [];
    let content = '';
    let finish = null;
    for await (const chunk of await client.chat.completions.create({ ...req, stream: true })) {
      for (const ch of chunk.choices) {
        if (ch.delta && ch.delta.content) content += ch.delta.content;
        if (ch.finish_reason) finish = ch.finish_reason;
        for (const d of (ch.delta && ch.delta.tool_calls) || []) {
          if (!calls[d.index]) {
            assert.ok(d.id && d.type === 'function' && d.function.name, `first delta of a call: ${JSON.stringify(d)}`);
            calls[d.index] = { id: d.id, type: 'function', function: { name: '', arguments: '' } };
          }
          if (d.function && d.function.name) calls[d.index].function.name += d.function.name;
          if (d.function && d.function.arguments) calls[d.index].function.arguments += d.function.arguments;
        }
      }
    }
    const m = full.choices[0].message;
    assert.equal(finish, full.choices[0].finish_reason, JSON.stringify(extra));
    assert.equal(content, m.content || '', JSON.stringify(extra));
    assert.deepEqual(calls.map((c) => [c.id, c.function.name, c.function.arguments]),
                     (m.tool_calls || []).map((c) => [c.id, c.function.name, c.function.arguments]));
    calls.forEach((c) => validCall(c));
  }
});

await check('tools streamed as they are written: id and name first, then argument fragments', async () => {
  const noteTool = [{
    type: 'function',
    function: {
      name: 'write_note',
      description: 'Writes a note',
      parameters: {
        type: 'object',
        properties: { text: { type: 'string', minLength: 60, maxLength: 80 } },
        required: ['text'],
        additionalProperties: false,
      },
    },
  }];
  const req = { model: 'tiny', messages: user('Write a long note'), tools: noteTool,
                tool_choice: { type: 'function', function: { name: 'write_note' } },
                max_tokens: 200, temperature: 0.9, seed: 11 };
  const full = await client.chat.completions.create(req);
  assert.equal(full.choices[0].finish_reason, 'tool_calls', JSON.stringify(full.choices[0]));
  const want = full.choices[0].message.tool_calls;
  assert.equal(want.length, 1);
  assert.ok(JSON.parse(want[0].function.arguments).text.length >= 60);
  const chunks = [];
  for await (const chunk of await client.chat.completions.create({ ...req, stream: true })) chunks.push(chunk);
  const toolChunks = [];  // [chunk number, delta]
  let finishAt = -1;
  chunks.forEach((chunk, k) => {
    for (const ch of chunk.choices) {
      for (const d of (ch.delta && ch.delta.tool_calls) || []) toolChunks.push([k, d]);
      if (ch.finish_reason) finishAt = k;
    }
  });
  assert.ok(toolChunks.length > 0, 'no tool-call delta');
  assert.equal(chunks[finishAt].choices[0].finish_reason, 'tool_calls');
  // The first delta of the call: index, id, type, name, no arguments yet.
  const [firstAt, head] = toolChunks[0];
  assert.equal(head.index, 0);
  assert.equal(head.id, want[0].id);
  assert.equal(head.type, 'function');
  assert.equal(head.function.name, 'write_note');
  assert.equal(head.function.arguments, '');
  // Then fragments only (no id, no name), in several chunks, the first well before the end.
  const fragments = toolChunks.slice(1);
  for (const [, d] of fragments) {
    assert.equal(d.index, 0);
    assert.ok(d.id === undefined && d.function.name === undefined, JSON.stringify(d));
    assert.ok(d.function.arguments.length > 0);
  }
  const fragmentChunks = new Set(fragments.map(([k]) => k));
  assert.ok(fragmentChunks.size > 1, `arguments came in ${fragmentChunks.size} chunk(s)`);
  assert.ok(firstAt < finishAt && fragments[0][0] < finishAt - 1,
            `first call delta at chunk ${firstAt}, first fragment at ${fragments[0][0]}, finish at ${finishAt}`);
  assert.equal(fragments.map(([, d]) => d.function.arguments).join(''), want[0].function.arguments);
  log(`     write_note: ${fragmentChunks.size} chunks of arguments (${want[0].function.arguments.length} bytes), ${chunks.length} chunks in all`);
});

await check('bad requests: status and error shape', async () => {
  errorShape(await rawPost(server.url, '/v1/chat/completions', '{"messages": [', {}), 400);
  errorShape(await rawPost(server.url, '/v1/chat/completions', { messages: 'hi' }), 400, 'messages');
  errorShape(await rawPost(server.url, '/v1/chat/completions', { messages: [{ role: 'robot', content: 'x' }] }), 400, 'messages/0/role');
  errorShape(await rawPost(server.url, '/v1/chat/completions', { messages: user('x'), temperature: 'hot' }), 400, 'temperature');
  errorShape(await rawPost(server.url, '/v1/chat/completions', { messages: user('x'), max_tokens: -3 }), 400, 'max_tokens');
  errorShape(await rawPost(server.url, '/v1/chat/completions', { messages: user('x'), n: 17 }), 400, 'n');
  errorShape(await rawPost(server.url, '/v1/chat/completions', { messages: user('x'), grammar: 'root ::= "a' }), 400, 'grammar');
  errorShape(await rawPost(server.url, '/v1/chat/completions', { messages: user('x'), regex: '(' }), 400, 'regex');
  errorShape(await rawPost(server.url, '/v1/completions', {
    prompt: 'x', token_trie: { modelId: 'm', descriptors: [{ path: 'p', leaves: [{ name: 'a', tokens: [99999999] }] }] },
  }), 400, 'token_trie');
  errorShape(await rawPost(server.url, '/v1/completions', { prompt: 'x', token_trie: 5 }), 400, 'token_trie');
  errorShape(await rawPost(server.url, '/v1/chat/completions', {
    messages: user('x'), response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'nonsense' } } },
  }), 400);
  errorShape(await rawPost(server.url, '/v1/chat/completions', {
    messages: user('x'), tools, tool_choice: { type: 'function', function: { name: 'nope' } },
  }), 400);
  errorShape(await rawPost(server.url, '/v1/chat/completions', {
    messages: user('x'), tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object', properties: { a: { type: 7 } } } } }],
  }), 400);
  const long = await rawPost(server.url, '/v1/completions', { prompt: 'hello world '.repeat(9000), max_tokens: 4 });
  errorShape(long, 400, 'prompt');
  assert.equal(long.json.error.code, 'context_length_exceeded');
  errorShape(await rawPost(server.url, '/v1/completions', { prompt: 'x'.repeat(300000) }), 413);
  const nokey = await rawPost(server.url, '/v1/chat/completions', { messages: user('x') }, { Authorization: 'Bearer wrong' });
  errorShape(nokey, 401);
  const r404 = await fetch(server.url + '/v1/nothing', { headers: { Authorization: `Bearer ${API_KEY}` } });
  errorShape({ status: r404.status, json: await r404.json(), text: '' }, 404);
  // Through the client: an APIError with the status.
  await assert.rejects(client.chat.completions.create({ model: 'tiny', messages: user('x'), temperature: 9 }),
                       (e) => e.status === 400);
  // The server still answers.
  const ok = await client.chat.completions.create({ model: 'tiny', messages: user('still there?'), max_tokens: 4, temperature: 0 });
  assert.ok(ok.choices[0].message.content !== undefined);
});

await check('other endpoints: models, tokenize/detokenize, apply-template, health, metrics, slots', async () => {
  const models = await client.models.list();
  assert.ok(models.data.length === 1 && models.data[0].id.endsWith('.gguf'));
  const t = await rawPost(server.url, '/tokenize', { content: 'Hello world' });
  assert.ok(Array.isArray(t.json.tokens) && t.json.tokens.length > 0);
  const d = await rawPost(server.url, '/detokenize', { tokens: t.json.tokens });
  assert.equal(d.json.content, 'Hello world');
  errorShape(await rawPost(server.url, '/detokenize', { tokens: [-5] }), 400, 'tokens/0');
  const a = await rawPost(server.url, '/apply-template', { messages: user('Hi') });
  assert.ok(a.json.prompt.includes('Hi'));
  const h = await fetch(server.url + '/health');  // no key needed
  assert.equal(h.status, 200);
  const m = await (await fetch(server.url + '/metrics', { headers: { Authorization: `Bearer ${API_KEY}` } })).text();
  for (const name of ['lacuna_requests_total', 'lacuna_time_to_first_token_seconds_bucket', 'lacuna_queue_depth',
                      'lacuna_kv_cells_used', 'lacuna_prefix_cache_hit_ratio', 'lacuna_completion_tokens_total']) {
    assert.ok(m.includes(name), `metrics lack ${name}`);
  }
  const s = await (await fetch(server.url + '/slots', { headers: { Authorization: `Bearer ${API_KEY}` } })).json();
  assert.equal(s.length, PARALLEL);
  // A JSON body sent as a form (curl -d's default type), larger than httplib's 8 KiB form limit.
  const form = await rawPost(server.url, '/v1/chat/completions',
                             { messages: user('x'.repeat(10000)), max_tokens: 2, temperature: 0 },
                             { 'Content-Type': 'application/x-www-form-urlencoded' });
  assert.equal(form.status, 200, form.text);
});

const system = { role: 'system', content: 'You are a helpful assistant. '.repeat(40) };
await check('embeddings: one L2-normalized vector per input, same text same vector', async () => {
  const r = await client.embeddings.create({ model: 'tiny', input: ['hello world', 'another text', 'hello world'], encoding_format: 'float' });
  assert.equal(r.data.length, 3);
  for (const d of r.data) {
    const norm = Math.sqrt(d.embedding.reduce((a, x) => a + x * x, 0));
    assert.ok(Math.abs(norm - 1) < 1e-3, `norm ${norm}`);
  }
  assert.deepEqual(r.data[0].embedding, r.data[2].embedding);
  assert.ok(r.usage.prompt_tokens > 0);
  errorShape(await rawPost(server.url, '/v1/embeddings', { input: 3 }), 400, 'input');
});

await check('a resent conversation reuses its prefix: the kept branch, or the prefix cache (cached_tokens), same greedy answer', async () => {
  const first = await client.chat.completions.create({ model: 'tiny', messages: [system, ...user('One')], max_tokens: 8, temperature: 0 });
  const second = await client.chat.completions.create({
    model: 'tiny', messages: [system, ...user('One'), first.choices[0].message, ...user('Two')], max_tokens: 8, temperature: 0,
  });
  // The first request's branch is kept in its slot: the second turn decodes only what follows
  // the first prompt (below the prefix cache's block granularity).
  assert.ok(second.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens - 1,
            `cached ${second.usage.prompt_tokens_details.cached_tokens} of ${second.usage.prompt_tokens}`);
  // The same turn without the kept branch (cache_prompt false: the block prefix cache only)
  // reuses at least half and gives the same greedy answer.
  const cold = await client.chat.completions.create({
    model: 'tiny', messages: [system, ...user('One'), first.choices[0].message, ...user('Two')], max_tokens: 8, temperature: 0,
    cache_prompt: false,
  });
  assert.ok(cold.usage.prompt_tokens_details.cached_tokens >= first.usage.prompt_tokens / 2,
            `cached ${cold.usage.prompt_tokens_details.cached_tokens} of ${cold.usage.prompt_tokens}`);
  assert.equal(cold.choices[0].message.content, second.choices[0].message.content);
});

await check('concurrent load: 16 clients x 4 requests (plain, schema, tools, stream), 0 failures', async () => {
  let done = 0;
  const clientLoop = async (k) => {
    for (let i = 0; i < 4; i++) {
      const kind = (k + i) % 4;
      const seed = k * 10 + i;
      if (kind === 0) {
        const r = await client.chat.completions.create({ model: 'tiny', messages: user(`Hello ${k}`), max_tokens: 16, temperature: 0.8, seed });
        assert.equal(typeof r.choices[0].message.content, 'string');
      } else if (kind === 1) {
        const r = await client.chat.completions.create({
          model: 'tiny', messages: user('A person'), max_tokens: 120, temperature: 0.8, seed,
          response_format: { type: 'json_schema', json_schema: { name: 'p', schema: personSchema } },
        });
        validPerson(r.choices[0].message.content);
      } else if (kind === 2) {
        const r = await client.chat.completions.create({
          model: 'tiny', messages: user('Weather?'), tools, tool_choice: 'required', max_tokens: 120, temperature: 0.8, seed,
        });
        r.choices[0].message.tool_calls.forEach((c) => validCall(c));
      } else {
        let n = 0;
        for await (const chunk of await client.chat.completions.create({ model: 'tiny', messages: user(`Stream ${k}`), max_tokens: 16, temperature: 0.8, seed, stream: true })) {
          n += chunk.choices.length;
        }
        assert.ok(n > 0);
      }
      done++;
    }
  };
  await Promise.all(Array.from({ length: 16 }, (_, k) => clientLoop(k)));
  assert.equal(done, 64);
});

await check('a client that disconnects mid-stream is cancelled and frees its slot', async () => {
  const metric = async () => {
    const m = await (await fetch(server.url + '/metrics', { headers: { Authorization: `Bearer ${API_KEY}` } })).text();
    return Number(m.match(/^lacuna_cancelled_total (\d+)/m)[1]);
  };
  const before = await metric();
  const controller = new AbortController();
  const res = await fetch(server.url + '/v1/chat/completions', {
    method: 'POST', signal: controller.signal,
    headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${API_KEY}` },
    body: JSON.stringify({ messages: user('Go on forever'), max_tokens: 4000, temperature: 0.8, seed: 3, stream: true,
                           grammar: 'root ::= [a-z ]+' }),
  });
  const reader = res.body.getReader();
  await reader.read();
  controller.abort();
  let after = before;
  for (let i = 0; i < 50 && after === before; i++) {
    await new Promise((r) => setTimeout(r, 100));
    after = await metric();
  }
  assert.ok(after > before, 'the branch was not cancelled');
  for (let i = 0; i < 50; i++) {
    const s = await (await fetch(server.url + '/slots', { headers: { Authorization: `Bearer ${API_KEY}` } })).json();
    if (s.every((x) => !x.is_processing)) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail('slots still busy');
});

await check('a client that aborts a non-streamed request is cancelled and frees its slot', async () => {
  const auth = { Authorization: `Bearer ${API_KEY}` };
  const cancelled = async () => Number((await (await fetch(server.url + '/metrics', { headers: auth })).text())
    .match(/^lacuna_cancelled_total (\d+)/m)[1]);
  const busy = async () => (await (await fetch(server.url + '/slots', { headers: auth })).json())
    .filter((x) => x.is_processing).length;
  const before = await cancelled();
  const controller = new AbortController();
  const pending = fetch(server.url + '/v1/chat/completions', {
    method: 'POST', signal: controller.signal, headers: { 'Content-Type': 'application/json', ...auth },
    body: JSON.stringify({ messages: user('Go on forever'), max_tokens: 4000, temperature: 0.8, seed: 4,
                           grammar: 'root ::= [a-z ]+' }),
  }).catch((e) => e);
  // Abort once the request generates (a slot is busy), long before its 4,000 tokens.
  let seen = false;
  for (let i = 0; i < 100 && !seen; i++) {
    seen = (await busy()) > 0;
    if (!seen) await new Promise((r) => setTimeout(r, 20));
  }
  assert.ok(seen, 'the request never took a slot');
  const t0 = Date.now();
  controller.abort();
  assert.equal((await pending).name, 'AbortError');
  let freed = false;
  for (let i = 0; i < 50 && !freed; i++) {
    await new Promise((r) => setTimeout(r, 100));
    freed = (await busy()) === 0 && (await cancelled()) > before;
  }
  assert.ok(freed, `after 5 s: cancelled ${await cancelled()} (was ${before}), ${await busy()} slot(s) busy`);
  log(`     slot freed ${Date.now() - t0} ms after the abort`);
});

await check('queue flood: 503 with Retry-After beyond the queue, no crash, then service recovers', async () => {
  // More requests at once than slots + queue, fewer than the server's 64 HTTP threads.
  const n = 60;
  const all = await Promise.all(Array.from({ length: n }, (_, i) => rawPost(server.url, '/v1/chat/completions', {
    messages: user(`Flood ${i}`), max_tokens: 48, temperature: 0.5, seed: i,
  })));
  const ok = all.filter((r) => r.status === 200).length;
  const busy = all.filter((r) => r.status === 503);
  assert.equal(ok + busy.length, n, `other statuses: ${all.filter((r) => r.status !== 200 && r.status !== 503).map((r) => r.status)}`);
  assert.ok(busy.length > 0, 'no 503 in a flood past the queue');
  assert.ok(ok >= PARALLEL, `only ${ok} served`);
  for (const b of busy) {
    errorShape(b, 503);
    assert.equal(b.headers.get('retry-after'), '1');
  }
  const after = await client.chat.completions.create({ model: 'tiny', messages: user('after the flood'), max_tokens: 8, temperature: 0 });
  assert.ok(after.choices.length === 1);
  log(`     flood: ${ok} served, ${busy.length} refused with 503`);
});

await check('SIGTERM under load: streams end, the server exits 0', async () => {
  const streams = Array.from({ length: 4 }, (_, i) => (async () => {
    try {
      for await (const chunk of await client.chat.completions.create({ model: 'tiny', messages: user(`Long ${i}`), max_tokens: 3000, temperature: 0.8, seed: i, stream: true, grammar: 'root ::= [a-z ]+' })) {
        void chunk;
      }
    } catch { /* an error event or a closed connection both end the stream */ }
  })());
  await new Promise((r) => setTimeout(r, 500));
  const exited = new Promise((resolve) => server.proc.on('exit', (code, sig) => resolve({ code, sig })));
  server.proc.kill('SIGTERM');
  const timeout = new Promise((_, reject) => setTimeout(() => reject(new Error('no exit within 15 s')), 15000));
  const { code } = await Promise.race([exited, timeout]);
  assert.equal(code, 0, server.stderr());
  await Promise.race([Promise.all(streams), timeout]);
});

await check('a restart with the same --persist-dir reuses the KV written before', async () => {
  const again = await startServer(serverArgs);
  try {
    const c = new OpenAI({ apiKey: API_KEY, baseURL: `${again.url}/v1`, maxRetries: 0, timeout: 60000 });
    const r = await c.chat.completions.create({ model: 'tiny', messages: [system, ...user('One')], max_tokens: 4, temperature: 0 });
    assert.ok(r.usage.prompt_tokens_details.cached_tokens >= r.usage.prompt_tokens / 2,
              `cached ${r.usage.prompt_tokens_details.cached_tokens} of ${r.usage.prompt_tokens}`);
  } finally {
    // Waited for, so that the KV directory is removed after the server's last write.
    const exited = new Promise((resolve) => again.proc.on('exit', resolve));
    again.proc.kill('SIGTERM');
    await Promise.race([exited, new Promise((resolve) => setTimeout(resolve, 15000))]);
  }
});

if (server.proc.exitCode === null) server.proc.kill('SIGKILL');
rmSync(persistDir, { recursive: true, force: true });
log(failures === 0 ? 'all server tests passed' : `${failures} server test(s) failed`);
process.exit(failures === 0 ? 0 : 1);
