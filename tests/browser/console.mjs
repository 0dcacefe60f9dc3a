// Drives the web console in a real headless Chromium against a running `agent-runtime serve`
// (started by cli/tests/console/browser.rs, which passes these variables):
//   CONSOLE_URL         the console, e.g. http://127.0.0.1:PORT/
//   CONSOLE_TOKEN       a bearer token
//   CONSOLE_SCREENSHOT  where the screenshot of the final page goes (a "-phone" one goes beside it)
//   CHROMIUM            the browser (default /usr/bin/chromium)
// The server must run the demo provider, keep at most 200 events per session, and stream
// `demo:slow` slowly enough to reload in the middle. Twice the script asks the harness, on stdout,
// to stop (`@@ stop-server`) and start (`@@ start-server`) the server, and waits for its answer
// (`stopped`, `started`) on stdin. Any failed check exits non-zero with the reason.

import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { chromium } from 'playwright-core';

const required = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};

const CONSOLE_URL = required('CONSOLE_URL');
const TOKEN = required('CONSOLE_TOKEN');
const SCREENSHOT = required('CONSOLE_SCREENSHOT');
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const TIMEOUT_MS = 30_000;
const CHROMIUM_FLAGS = [
  '--headless',
  '--no-sandbox',
  '--disable-gpu',
  '--disable-quic',
  '--no-first-run',
  '--disable-background-networking',
  '--disable-component-update',
  '--disable-sync',
];

const SLOW_TEXT = Array.from({ length: 40 }, (_, index) => `slow-${index + 1} `).join('');
const LONG_DELTAS = 250;
// Paced, so that a browser on a loaded machine keeps up with the live stream: an unpaced burst
// of 250 could leave it more than the 200 retained events behind, which ends its stream with
// STALE_CURSOR before the turn is over (a legitimate outcome, but not the one this step checks).
const LONG_INPUT = `demo:deltas=${LONG_DELTAS} demo:interval=10`;
const LONG_TEXT = Array.from({ length: LONG_DELTAS }, (_, index) => `delta-${index + 1} `).join('');

const step = (name) => console.log(`step: ${name}`);

// ---- talking to the harness ----

const harness = createInterface({ input: process.stdin })[Symbol.asyncIterator]();

async function askHarness(request, answer) {
  console.log(`@@ ${request}`);
  const { value, done } = await harness.next();
  assert.ok(!done, `the harness closed stdin instead of answering ${request}`);
  assert.equal(value.trim(), answer);
}

// ---- page helpers ----

const turns = (page) => page.locator('#conversation article.turn');

async function send(page, text) {
  await page.getByLabel('Message').fill(text);
  await page.getByRole('button', { name: 'Send' }).click();
}

/** Waits until the `index`-th turn exists and has ended in `state`. */
async function turnEnded(page, index, state = 'done') {
  const turn = turns(page).nth(index);
  await turn.waitFor();
  await page.waitForFunction(
    ([i, expected]) => document.querySelectorAll('#conversation article.turn')[i]?.dataset.state === expected,
    [index, state],
    { timeout: TIMEOUT_MS },
  );
  return turn;
}

const assistantTexts = (turn) => turn.locator('.assistant-text').allTextContents();
const userTexts = (turn) => turn.locator('.message.user .text').allTextContents();
const allUserTexts = (page) => page.locator('#conversation .message.user .text').allTextContents();

/** Waits until the live indicator's text equals `expected` (or starts with it, with `prefix`). */
async function connectionShows(page, expected, { prefix = false } = {}) {
  await page
    .waitForFunction(
      ([text, startsWith]) => {
        const shown = document.getElementById('connection').textContent;
        return startsWith ? shown.startsWith(text) : shown === text;
      },
      [expected, prefix],
      { timeout: TIMEOUT_MS },
    )
    .catch(async (error) => {
      const shown = await page.locator('#connection').textContent();
      throw new Error(`the live indicator never showed "${expected}${prefix ? '…' : ''}" (it shows "${shown}")`, { cause: error });
    });
}

/** The sequences listed by the raw event inspector. */
const inspectedSequences = (page) =>
  page.$$eval('#event-list .sequence', (nodes) => nodes.map((node) => Number(node.textContent.slice(1))));

function assertContiguousFromOne(sequences) {
  assert.ok(sequences.length > 0, 'the inspector lists events');
  sequences.forEach((sequence, index) => assert.equal(sequence, index + 1, `event #${index + 1} is listed once, in order`));
}

// ---- the run ----

const userDataDir = mkdtempSync(join(tmpdir(), 'console-chromium-'));
const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath: CHROMIUM,
  headless: true,
  args: CHROMIUM_FLAGS,
  viewport: { width: 1280, height: 900 },
});
const pageErrors = [];
const policyViolations = [];
try {
  const page = context.pages()[0] ?? (await context.newPage());
  page.setDefaultTimeout(TIMEOUT_MS);
  page.on('pageerror', (error) => pageErrors.push(error.message));
  page.on('console', (message) => {
    const text = message.text();
    if (/content security policy/i.test(text)) policyViolations.push(text);
    if (message.type() === 'error' || message.type() === 'warning') console.log(`browser ${message.type()}: ${text}`);
  });

  step('open the console and sign in');
  await page.goto(CONSOLE_URL);
  await page.getByLabel('Access token').fill(TOKEN);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Sessions' }).waitFor();
  assert.equal(await page.getByLabel('Access token').isVisible(), false, 'the sign-in form is gone');

  step('an untitled session is titled by its first input, never by its id');
  await page.getByRole('button', { name: 'New session' }).click();
  await page.waitForFunction(() => location.hash.startsWith('#session='));
  const untitledId = decodeURIComponent(new URL(page.url()).hash.slice('#session='.length));
  await page.getByRole('heading', { name: /^Untitled session/, level: 2 }).waitFor();
  await connectionShows(page, 'Live');
  await send(page, 'plan the garden');
  await turnEnded(page, 0);
  await page.getByRole('link', { name: /plan the garden/ }).waitFor();
  assert.equal(await page.getByRole('link', { name: new RegExp(untitledId) }).count(), 0, 'no session is listed by its id');

  step('create a session');
  await page.getByLabel('Title of a new session (optional)').fill('browser test');
  await page.getByRole('button', { name: 'New session' }).click();
  await page.getByRole('heading', { name: 'browser test', level: 2 }).waitFor();
  await page.waitForFunction(() => location.hash.startsWith('#session='));
  const sessionUrl = page.url();
  assert.ok(!sessionUrl.includes(TOKEN), 'the token is never in the URL');
  await connectionShows(page, 'Live');
  await page.getByRole('link', { name: /browser test/ }).waitFor();

  step('send input and see the streamed answer');
  await send(page, 'hello');
  const hello = await turnEnded(page, 0);
  assert.deepEqual(await userTexts(hello), ['hello']);
  assert.deepEqual(await assistantTexts(hello), ['[demo] You said: hello']);

  step('approve a tool request, with the keyboard');
  await send(page, 'please: needs approval');
  const asking = turns(page).nth(1);
  const prompt = asking.getByRole('group', { name: 'Run the demo tool' });
  await prompt.waitFor();
  await prompt.getByText('The agent wants to run the tool demo_approval.').waitFor();
  const approve = prompt.getByRole('button', { name: 'Approve', exact: true });
  await approve.focus();
  await page.keyboard.press('Enter');
  await turnEnded(page, 1);
  assert.deepEqual(await assistantTexts(asking), ['[demo] Asking to run the demo tool.', '[demo] The demo tool was approved.']);
  await prompt.getByText('Approved', { exact: true }).waitFor();
  assert.equal(await prompt.getByRole('button').count(), 0, 'an answered prompt has no buttons');
  await asking.locator('.tool[data-state="done"]').waitFor();

  step('reload while deltas stream');
  await send(page, 'demo:slow');
  await page.waitForFunction(() => {
    const turn = document.querySelectorAll('#conversation article.turn')[2];
    return turn?.dataset.state === 'running' && (turn.querySelector('.assistant-text')?.textContent ?? '').includes('slow-3 ');
  });
  const seenBeforeReload = (await assistantTexts(turns(page).nth(2))).join('');
  assert.ok(SLOW_TEXT.startsWith(seenBeforeReload), `streamed text so far is a prefix: ${seenBeforeReload}`);
  assert.notEqual(seenBeforeReload, SLOW_TEXT, 'the reload happens mid-stream');
  await page.reload();
  await page.getByRole('heading', { name: 'browser test', level: 2 }).waitFor();
  assert.equal(page.url(), sessionUrl, 'the reload reopens the session');
  const slow = await turnEnded(page, 2);
  assert.equal(await turns(page).count(), 3, 'no request is shown twice');
  assert.deepEqual(await assistantTexts(slow), [SLOW_TEXT], 'each delta exactly once, in order');
  assert.deepEqual(await userTexts(slow), ['demo:slow']);
  assert.deepEqual(await userTexts(turns(page).nth(0)), ['hello']);
  assert.deepEqual(await assistantTexts(turns(page).nth(0)), ['[demo] You said: hello']);
  assert.deepEqual(await userTexts(turns(page).nth(1)), ['please: needs approval']);
  assert.deepEqual(await assistantTexts(turns(page).nth(1)), ['[demo] Asking to run the demo tool.', '[demo] The demo tool was approved.']);
  assert.equal(await page.getByRole('button', { name: 'Approve', exact: true }).count(), 0, 'the answered prompt stays answered');
  await turns(page).nth(1).getByRole('group', { name: 'Run the demo tool' }).getByText('Approved', { exact: true }).waitFor();
  assertContiguousFromOne(await inspectedSequences(page));

  step('the raw event inspector shows an event');
  await page.getByText(/^Raw events/).click();
  const firstEvent = page.locator('#event-list details').first();
  await firstEvent.locator('summary').click();
  // The JSON is filled in by the `toggle` event, which fires after the click returns.
  const shown = firstEvent.locator('pre', { hasText: /"sequence"/ });
  await shown.waitFor({ timeout: TIMEOUT_MS });
  const json = JSON.parse(await shown.textContent());
  assert.equal(json.sequence, 1);
  assert.equal(json.type, 'session.stream');

  step('the server restarts: the indicator shows the reconnect and where it resumed');
  const lastSequence = (await inspectedSequences(page)).at(-1);
  await askHarness('stop-server', 'stopped');
  await connectionShows(page, 'Reconnecting', { prefix: true });
  await askHarness('start-server', 'started');
  await connectionShows(page, `Live · resumed after #${lastSequence}`);

  step('a reload after the restart resumes the session: its transcript brings the inputs back');
  await page.reload();
  await page.getByRole('heading', { name: 'browser test', level: 2 }).waitFor();
  await turnEnded(page, 2);
  await connectionShows(page, 'Live');
  assert.deepEqual(await allUserTexts(page), ['hello', 'please: needs approval', 'demo:slow']);
  await send(page, 'hello again');
  const again = await turnEnded(page, 3);
  assert.deepEqual(await assistantTexts(again), ['[demo] You said: hello again']);
  assertContiguousFromOne(await inspectedSequences(page));

  step('fork the session: the copy starts with the same history');
  await page.getByRole('button', { name: 'Fork' }).click();
  await page.getByRole('heading', { name: 'browser test (fork)', level: 2 }).waitFor();
  assert.notEqual(page.url(), sessionUrl);
  await connectionShows(page, 'Live');
  await turnEnded(page, 3, 'saved');
  assert.deepEqual(await allUserTexts(page), ['hello', 'please: needs approval', 'demo:slow', 'hello again']);
  assert.deepEqual(await assistantTexts(turns(page).nth(2)), [SLOW_TEXT]);

  step('abort a running request');
  await send(page, 'demo:slow');
  await page.waitForFunction(() => {
    const turn = document.querySelectorAll('#conversation article.turn')[4];
    return turn?.dataset.state === 'running' && (turn.querySelector('.assistant-text')?.textContent ?? '').includes('slow-2 ');
  });
  await page.getByRole('button', { name: 'Abort' }).click();
  const aborted = await turnEnded(page, 4, 'error');
  await aborted.getByText('Aborted', { exact: true }).waitFor();
  const abortedText = (await assistantTexts(aborted)).join('');
  assert.ok(SLOW_TEXT.startsWith(abortedText) && abortedText !== SLOW_TEXT, `aborted mid-stream: ${abortedText}`);
  assert.equal(await page.getByRole('button', { name: 'Abort' }).isVisible(), false);

  step('close the session');
  page.once('dialog', (dialog) => dialog.accept());
  await page.getByRole('button', { name: 'Close session' }).click();
  await connectionShows(page, 'Session closed');
  await page.getByText('Session closed (user).').waitFor();
  assert.equal(await page.getByLabel('Message').isDisabled(), true, 'a closed session takes no input');
  await page.getByRole('link', { name: /browser test \(fork\).*closed/ }).waitFor();

  step('a session whose early events are no longer retained');
  await page.getByLabel('Title of a new session (optional)').fill('long history');
  await page.getByRole('button', { name: 'New session' }).click();
  await page.getByRole('heading', { name: 'long history', level: 2 }).waitFor();
  await connectionShows(page, 'Live');
  await send(page, LONG_INPUT);
  assert.deepEqual(await assistantTexts(await turnEnded(page, 0)), [LONG_TEXT]);
  await page.reload();
  await page.getByRole('heading', { name: 'long history', level: 2 }).waitFor();
  await page.getByText(/Older events are no longer kept/).waitFor({ state: 'attached' });
  const saved = await turnEnded(page, 0, 'saved');
  assert.deepEqual(await assistantTexts(saved), [LONG_TEXT], 'the saved transcript, once');
  assert.deepEqual(await userTexts(saved), [LONG_INPUT]);
  await connectionShows(page, 'Live · resumed after #', { prefix: true });
  await send(page, 'still here');
  assert.deepEqual(await assistantTexts(await turnEnded(page, 1)), ['[demo] You said: still here']);
  assert.equal(await turns(page).count(), 2);

  step('answer a question from the agent (AskUserQuestion)');
  const questions = JSON.parse(readFileSync(new URL('../fixtures/tools/ask_user_question.json', import.meta.url), 'utf8'));
  await send(page, `demo:tool AskUserQuestion ${JSON.stringify(questions)}`);
  const question = page.getByRole('group', { name: 'Question from the agent' });
  await question.waitFor();
  await question.getByText('Store: Which store?').waitFor();
  await question.getByRole('radio', { name: /PostgreSQL/ }).check();
  await question.getByRole('checkbox', { name: /Metrics/ }).check();
  await question.getByRole('checkbox', { name: /Audit/ }).check();
  await question.getByRole('button', { name: 'Send answers' }).click();
  const answered = (await assistantTexts(await turnEnded(page, 2))).join('');
  assert.ok(answered.includes('Store: PostgreSQL') && answered.includes('Extras: Metrics, Audit'), answered);
  await question.getByText('Answers sent', { exact: true }).waitFor();
  assert.equal(await question.getByRole('button').count(), 0, 'an answered question has no buttons');
  assert.equal(await turns(page).count(), 3);

  step('reject a plan with feedback (ExitPlanMode)');
  await send(page, `demo:tool ExitPlanMode ${JSON.stringify({ plan: '1. Add the table\n2. Test it' })}`);
  const planPrompt = page.getByRole('group', { name: 'Approve the plan' });
  await planPrompt.waitFor();
  await planPrompt.getByText('2. Test it').waitFor();
  await planPrompt.getByLabel('Feedback if you reject (optional)').fill('Test it first.');
  await planPrompt.getByRole('button', { name: 'Reject' }).click();
  await turnEnded(page, 3);
  await planPrompt.getByText('Denied', { exact: true }).waitFor();
  assert.equal(await turns(page).count(), 4);

  step('a phone-sized screen (375×740)');
  await page.setViewportSize({ width: 375, height: 740 });
  await page.goto(sessionUrl);
  await page.getByRole('heading', { name: 'browser test', level: 2 }).waitFor();
  await turnEnded(page, 3);
  const width = await page.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(width <= 375, `nothing scrolls sideways (page width ${width}px)`);
  const toggle = page.getByRole('button', { name: 'Session list' });
  assert.equal(await toggle.getAttribute('aria-expanded'), 'false', 'the session list folds away on a phone');
  await toggle.click();
  await page.getByRole('link', { name: /long history/ }).waitFor();
  await toggle.click();
  for (const control of [page.getByLabel('Message'), page.getByRole('button', { name: 'Send' })]) {
    await control.scrollIntoViewIfNeeded();
    const box = await control.boundingBox();
    assert.ok(box && box.x >= 0 && box.x + box.width <= 375, 'the composer fits the screen');
  }
  await send(page, 'from a phone');
  assert.deepEqual(await assistantTexts(await turnEnded(page, 4)), ['[demo] You said: from a phone']);
  await page.screenshot({ path: SCREENSHOT.replace(/\.png$/, '-phone.png'), fullPage: true });

  step('a subagent and an MCP tool call are shown for what they are');
  await page.setViewportSize({ width: 1280, height: 900 });
  const todos = { todos: [{ content: 'Test it', status: 'pending', activeForm: 'Testing it' }] };
  const child = { subagent_type: 'general-purpose', description: 'write the todo list', prompt: `demo:tool TodoWrite ${JSON.stringify(todos)}` };
  await send(page, `demo:tool Task ${JSON.stringify(child)}`);
  const taskCard = (await turnEnded(page, 5)).locator('details.tool').first();
  await taskCard.locator('.tool-badge', { hasText: 'general-purpose' }).waitFor();
  await taskCard.locator('summary').click();
  await taskCard.getByRole('list', { name: 'Subagent activity' }).getByText('general-purpose: TodoWrite').waitFor();
  assert.match(await taskCard.locator('.tool-status').textContent(), /^general-purpose finished: 1 tool calls/);
  await send(page, `demo:tool mcp__docs__search ${JSON.stringify({ query: 'retention' })}`);
  const mcpCard = (await turnEnded(page, 6)).locator('details.tool').first();
  assert.equal(await mcpCard.locator('.tool-name').textContent(), 'search');
  assert.equal(await mcpCard.locator('.tool-badge').textContent(), 'MCP · docs');

  step('the final page');
  await page.getByRole('link', { name: /^browser test active/ }).waitFor();
  await page.screenshot({ path: SCREENSHOT, fullPage: true });

  step('sign out forgets the token');
  await page.getByRole('button', { name: 'Sign out' }).click();
  await page.getByLabel('Access token').waitFor();
  assert.equal(await page.evaluate(() => sessionStorage.length), 0);
  await page.reload();
  await page.getByLabel('Access token').waitFor();

  assert.deepEqual(pageErrors, [], 'no uncaught errors in the page');
  assert.deepEqual(policyViolations, [], 'nothing the content security policy had to block');
  console.log('console browser test: all steps passed');
} finally {
  await context.close();
  rmSync(userDataDir, { recursive: true, force: true });
  harness.return?.();
  process.stdin.destroy();
}
