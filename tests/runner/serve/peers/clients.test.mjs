// The official JavaScript clients (npm's `ollama` and `openai`) against the server at
// RUNNER_URL, which serves smollm2:135m, tiny-qwen (tools and thinking) and tiny-bert
// (embeddings); run by tests/peers/test_js_clients.py with node's test runner.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Ollama } from 'ollama';
import OpenAI from 'openai';

const host = process.env.RUNNER_URL;
const ollama = new Ollama({ host });
const openai = new OpenAI({ baseURL: `${host}/v1`, apiKey: 'unused', maxRetries: 0 });
const QUESTION = [{ role: 'user', content: 'What is the capital of France?' }];
const GREEDY = { temperature: 0, num_predict: 8 };
const WEATHER = {
  type: 'function',
  function: {
    name: 'get_weather', description: 'The weather of a city',
    parameters: { type: 'object', required: ['location'], additionalProperties: false,
                  properties: { location: { type: 'string', enum: ['Boston', 'Paris'] } } },
  },
};

test('ollama: list, show, ps and version', async () => {
  const { models } = await ollama.list();
  assert.ok(models.some((m) => m.name === 'smollm2:135m'));
  const shown = await ollama.show({ model: 'tiny-qwen' });
  assert.ok(shown.capabilities.includes('tools') && shown.capabilities.includes('thinking'));
  assert.ok((await ollama.version()).version);
});

test('ollama: generate and chat, whole and streamed', async () => {
  const whole = await ollama.generate({ model: 'smollm2:135m', prompt: 'The capital of France is',
                                        raw: true, options: GREEDY });
  assert.equal(whole.done, true);
  assert.match(whole.response, /Paris/);
  let text = '';
  let last;
  for await (const part of await ollama.chat({ model: 'smollm2:135m', messages: QUESTION,
                                               stream: true, options: GREEDY })) {
    text += part.message.content;
    last = part;
  }
  assert.match(text, /Paris/);
  assert.equal(last.done, true);
  assert.ok(last.eval_count > 0 && last.prompt_eval_count > 0);
});

test('ollama: structured output and embeddings', async () => {
  const format = { type: 'object', required: ['city'], properties: { city: { type: 'string', maxLength: 12 } } };
  const reply = await ollama.chat({ model: 'smollm2:135m', messages: QUESTION, format,
                                    options: { temperature: 0, num_predict: 40 } });
  assert.equal(typeof JSON.parse(reply.message.content).city, 'string');
  const { embeddings } = await ollama.embed({ model: 'tiny-bert', input: ['one', 'two'] });
  assert.equal(embeddings.length, 2);
  assert.ok(Math.abs(Math.hypot(...embeddings[0]) - 1) < 1e-4);
});

test('ollama: errors come back as ResponseError with the status', async () => {
  await assert.rejects(ollama.chat({ model: 'no-such-model', messages: QUESTION }),
                       (error) => error.status_code === 404 && /not found/.test(error.error));
});

test('openai: chat completions, streamed with usage', async () => {
  const reply = await openai.chat.completions.create({ model: 'smollm2:135m', messages: QUESTION,
                                                       max_tokens: 8, temperature: 0 });
  assert.match(reply.choices[0].message.content, /Paris/);
  const stream = await openai.chat.completions.create({
    model: 'smollm2:135m', messages: QUESTION, max_tokens: 8, temperature: 0, stream: true,
    stream_options: { include_usage: true } });
  let text = '';
  let usage;
  for await (const chunk of stream) {
    text += chunk.choices[0]?.delta?.content ?? '';
    usage = chunk.usage ?? usage;
  }
  assert.equal(text, reply.choices[0].message.content);
  assert.equal(usage.completion_tokens, reply.usage.completion_tokens);
});

test('openai: a forced tool call, and its result sent back', async () => {
  const messages = [{ role: 'user', content: 'Weather in Boston?' }];
  const reply = await openai.chat.completions.create({
    model: 'tiny-qwen', messages, tools: [WEATHER], tool_choice: 'required',
    reasoning_effort: 'none', temperature: 0 });
  const [call] = reply.choices[0].message.tool_calls;
  assert.equal(call.function.name, 'get_weather');
  assert.ok(['Boston', 'Paris'].includes(JSON.parse(call.function.arguments).location));
  const next = await openai.chat.completions.create({
    model: 'tiny-qwen', tools: [WEATHER], reasoning_effort: 'none', max_tokens: 4,
    messages: [...messages, reply.choices[0].message,
               { role: 'tool', tool_call_id: call.id, content: 'Sunny' }] });
  assert.ok(next.choices[0].finish_reason);
});

test('openai: completions, embeddings (base64 by default), models, responses', async () => {
  const done = await openai.completions.create({ model: 'smollm2:135m', prompt: 'The capital of France is',
                                                 max_tokens: 4, temperature: 0 });
  assert.match(done.choices[0].text, /Paris/);
  const vectors = await openai.embeddings.create({ model: 'tiny-bert', input: ['one', 'two'] });
  assert.equal(vectors.data.length, 2);
  assert.equal(vectors.data[0].embedding.length, 64);
  const listed = await openai.models.list();
  assert.ok(listed.data.some((m) => m.id === 'smollm2:135m'));
  const response = await openai.responses.create({ model: 'smollm2:135m', input: 'The capital of France is',
                                                   max_output_tokens: 8, temperature: 0 });
  assert.match(response.output_text, /Paris/);
});

test('openai: errors come back as APIError with the status', async () => {
  await assert.rejects(openai.chat.completions.create({ model: 'no-such-model', messages: QUESTION }),
                       (error) => error.status === 404);
  await assert.rejects(openai.chat.completions.create({ model: 'smollm2:135m', messages: [] }),
                       (error) => error.status === 400);
});
