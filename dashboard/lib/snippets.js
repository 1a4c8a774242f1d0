// The first call, as code to paste: the official OpenAI and Anthropic SDKs pointed at
// this gateway's proxy with a spendgate key. When the organization stores the
// provider's key, the spendgate key is all the agent sends (as the SDK's API key);
// otherwise the agent sends its own provider key and the spendgate key as a header.

export const SNIPPETS = [
  ['openai-python', 'OpenAI · Python'],
  ['openai-node', 'OpenAI · Node.js'],
  ['anthropic-python', 'Anthropic · Python'],
  ['anthropic-node', 'Anthropic · Node.js'],
];

export const KEY_PLACEHOLDER = 'svc_live_sk_…';
const PROMPT = 'Say hello in five words.';

/** The proxy's base URL as this browser can reach it: a wildcard listen address
 * (0.0.0.0, [::]) becomes the host the dashboard was opened on. */
export function reachableProxy(proxyUrl) {
  try {
    const u = new URL(proxyUrl);
    if (u.hostname === '0.0.0.0' || u.hostname === '[::]') u.hostname = location.hostname;
    return u.toString().replace(/\/$/, '');
  } catch {
    return proxyUrl;
  }
}

/** The code of snippet `id` for `proxy`, `key`, and whether the provider's key is
 * stored by the gateway. */
export function snippet(id, { proxy, key, stored }) {
  const k = JSON.stringify(key || KEY_PLACEHOLDER);
  switch (id) {
    case 'openai-python': return [
      ...(stored ? [] : ['import os', '']),
      'from openai import OpenAI',
      '',
      stored ? `client = OpenAI(\n    base_url=${JSON.stringify(`${proxy}/v1`)},\n    api_key=${k},\n)`
        : `client = OpenAI(\n    base_url=${JSON.stringify(`${proxy}/v1`)},\n    api_key=os.environ["OPENAI_API_KEY"],\n    default_headers={"X-Service-Key": ${k}},\n)`,
      'response = client.chat.completions.create(',
      '    model="gpt-4o-mini",',
      `    messages=[{"role": "user", "content": ${JSON.stringify(PROMPT)}}],`,
      ')',
      'print(response.choices[0].message.content)',
    ].join('\n');
    case 'openai-node': return [
      'import OpenAI from "openai";',
      '',
      stored ? `const client = new OpenAI({\n  baseURL: ${JSON.stringify(`${proxy}/v1`)},\n  apiKey: ${k},\n});`
        : `const client = new OpenAI({\n  baseURL: ${JSON.stringify(`${proxy}/v1`)},\n  apiKey: process.env.OPENAI_API_KEY,\n  defaultHeaders: { "X-Service-Key": ${k} },\n});`,
      'const response = await client.chat.completions.create({',
      '  model: "gpt-4o-mini",',
      `  messages: [{ role: "user", content: ${JSON.stringify(PROMPT)} }],`,
      '});',
      'console.log(response.choices[0].message.content);',
    ].join('\n');
    case 'anthropic-python': return [
      ...(stored ? [] : ['import os', '']),
      'from anthropic import Anthropic',
      '',
      stored ? `client = Anthropic(\n    base_url=${JSON.stringify(proxy)},\n    api_key=${k},\n)`
        : `client = Anthropic(\n    base_url=${JSON.stringify(proxy)},\n    api_key=os.environ["ANTHROPIC_API_KEY"],\n    default_headers={"X-Service-Key": ${k}},\n)`,
      'message = client.messages.create(',
      '    model="claude-haiku-4-5",',
      '    max_tokens=256,',
      `    messages=[{"role": "user", "content": ${JSON.stringify(PROMPT)}}],`,
      ')',
      'print(message.content[0].text)',
    ].join('\n');
    default: return [
      'import Anthropic from "@anthropic-ai/sdk";',
      '',
      stored ? `const client = new Anthropic({\n  baseURL: ${JSON.stringify(proxy)},\n  apiKey: ${k},\n});`
        : `const client = new Anthropic({\n  baseURL: ${JSON.stringify(proxy)},\n  apiKey: process.env.ANTHROPIC_API_KEY,\n  defaultHeaders: { "X-Service-Key": ${k} },\n});`,
      'const message = await client.messages.create({',
      '  model: "claude-haiku-4-5",',
      '  max_tokens: 256,',
      `  messages: [{ role: "user", content: ${JSON.stringify(PROMPT)} }],`,
      '});',
      'console.log(message.content[0].text);',
    ].join('\n');
  }
}
