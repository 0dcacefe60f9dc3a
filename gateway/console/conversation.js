// The chat view of one session, built from its event log (docs/protocol.md §6). Applying the log
// from its first event always builds the same view, and an event at or below the last applied
// sequence is ignored, so a replay after a reload or a reconnect never duplicates or drops text.
//
// One <article> per request: the input that started it, then what the agent streamed (text,
// thinking, tools, approval prompts, errors), then how it ended. Input text is not in the event
// log; it comes from this page's own submissions and from the transcript of `session.read`
// (user messages carry `correlation.{inputId, requestId}`).

import { describeError, h, pretty, preview } from './dom.js';

const UNKNOWN_INPUT = '(input text not available)';

const OUTCOMES = {
  approve: 'Approved',
  deny: 'Denied',
  session: 'Approved for this session',
  answer: 'Answers sent',
  decline: 'Declined',
};

/** The text of message content: a string, or the text parts of a part list. */
export function contentText(content) {
  if (typeof content === 'string') return content;
  if (!Array.isArray(content)) return '';
  return content
    .map((part) => (part?.type === 'text' ? part.text : part?.type === 'image_url' ? '[image]' : ''))
    .join('\n');
}

/**
 * What a prompt's answer was, read from what followed it in the log, for a prompt this page did
 * not answer (one answered elsewhere, or before a reload): a denial is the tool's result
 * `{denied: true}`, an approval for the session a `tool_permission_updates`, an approval the
 * tool running; a question or a plan is answered unless its result is an error.
 */
function decisionShown(approval, turn, { name, output, isError }) {
  if (approval.kind === 'question') return isError ? OUTCOMES.decline : OUTCOMES.answer;
  if (approval.kind === 'plan') return isError ? OUTCOMES.decline : OUTCOMES.approve;
  if (isError && output?.denied === true) return OUTCOMES.deny;
  if (turn.allowedForSession?.has(name)) return OUTCOMES.session;
  return isError ? 'Answered' : OUTCOMES.approve;
}

export class Conversation {
  #root;
  #hooks;
  #turns = new Map(); // requestId -> turn
  #inputs = new Map(); // inputId -> text
  #starters = new Map(); // requestId -> inputId of the input that started the request
  #waiting = new Map(); // "input:ID" | "request:ID" -> <p> elements waiting for input text
  #approvals = new Map(); // permissionRequestId -> approval
  #last = null; // the turn of the newest event
  #lastSequence = 0;
  #closed = false;

  /**
   * @param {HTMLElement} root the conversation log element
   * @param {{ onDecision: (id: string, decision: object) => Promise<unknown>,
   *           onUnknownInput?: (requestId: string) => void, onApproval?: (approval: object) => void }} hooks
   */
  constructor(root, hooks) {
    this.#root = root;
    this.#hooks = hooks;
  }

  reset() {
    this.#root.replaceChildren();
    this.#turns.clear();
    this.#inputs.clear();
    this.#starters.clear();
    this.#waiting.clear();
    this.#approvals.clear();
    this.#last = null;
    this.#lastSequence = 0;
    this.#closed = false;
  }

  get lastSequence() {
    return this.#lastSequence;
  }

  get closed() {
    return this.#closed;
  }

  /** The request that is running, if any. */
  get runningRequestId() {
    const turn = this.#last;
    return turn && turn.state === 'running' ? turn.requestId : undefined;
  }

  /** Records the text of an input; `requestId` only when that input started the request. */
  knowInput({ inputId, requestId, text }) {
    if (inputId === undefined) return;
    this.#inputs.set(inputId, text);
    this.#fill(`input:${inputId}`, text);
    if (requestId !== undefined && this.#starters.get(requestId) === undefined) {
      this.#starters.set(requestId, inputId);
      this.#fill(`request:${requestId}`, text);
    }
  }

  /** Learns the inputs of a transcript (user messages, oldest first). */
  learnInputs(messages) {
    for (const message of messages ?? []) {
      if (message?.role !== 'user') continue;
      const { inputId, requestId } = message.correlation ?? {};
      this.knowInput({ inputId, requestId, text: contentText(message.content) });
    }
  }

  /** Marks inputs whose text could not be found as such (they stay fillable). */
  markUnknownInputs() {
    for (const nodes of this.#waiting.values()) {
      for (const node of nodes) {
        node.textContent = UNKNOWN_INPUT;
        node.classList.replace('pending', 'unknown');
      }
    }
  }

  /** Applies one event; returns false for an event already applied. */
  apply(event) {
    if (event.sequence <= this.#lastSequence) return false;
    this.#lastSequence = event.sequence;
    if (event.type === 'session.stream') this.#stream(event);
    else if (event.type === 'permission.requested') this.#permission(event.data);
    else if (event.type === 'session.closed') this.#close(event.data);
    return true;
  }

  /**
   * Shows a `session.read` transcript (used when the event history is no longer retained). A
   * request that later shows up in the events is rebuilt from them, so nothing appears twice.
   */
  showTranscript(messages) {
    this.learnInputs(messages);
    let turn = null;
    let anonymous = 0;
    for (const message of messages ?? []) {
      if (message?.role === 'user') {
        const { inputId, requestId } = message.correlation ?? {};
        if (turn && requestId !== undefined && requestId === turn.requestId) {
          turn.body.append(this.#userMessage(`input:${inputId}`));
          turn.open = null;
          continue;
        }
        const key = requestId ?? `transcript-${(anonymous += 1)}`;
        if (requestId === undefined) this.knowInput({ inputId: key, requestId: key, text: contentText(message.content) });
        turn = this.#savedTurn(key);
      } else if (message?.role === 'assistant') {
        turn ??= this.#savedTurn(`transcript-${(anonymous += 1)}`);
        const text = contentText(message.content);
        if (text) this.#appendText(turn, text);
        for (const call of message.tool_calls ?? []) {
          this.#toolUse(turn, { id: call.id, name: call.function?.name ?? 'tool', input: call.function?.arguments });
        }
      } else if (message?.role === 'tool' && turn) {
        this.#toolResult(turn, { id: message.tool_call_id, name: message.name ?? 'tool', output: contentText(message.content) });
      }
    }
  }

  #savedTurn(key) {
    if (!this.#starters.has(key)) this.#starters.set(key, undefined);
    const turn = this.#turn(key);
    turn.fromTranscript = true;
    this.#end(turn, 'saved', 'From the saved transcript');
    return turn;
  }

  #stream(event) {
    const data = event.data;
    const requestId = event.requestId ?? data.requestId;
    if (requestId === undefined) return;
    const turn = this.#turn(requestId);
    switch (data.type) {
      case 'content':
        this.#appendText(turn, data.delta);
        break;
      case 'thinking':
        this.#appendThinking(turn, data.delta);
        break;
      case 'tool_use':
        this.#toolUse(turn, data);
        break;
      case 'tool_progress':
        this.#toolNote(turn, data, data.progress?.message ?? 'working…');
        if (data.progress?.data?.subagentId) this.#childActivity(turn, data);
        break;
      case 'tool_message':
        this.#toolNote(turn, data, data.content?.summary ?? '');
        break;
      case 'tool_result':
        this.#toolResult(turn, data);
        break;
      case 'tool_permission_updates':
        // An approval for the session: the prompt it answered says so after a reload too.
        turn.allowedForSession = (turn.allowedForSession ?? new Set()).add(data.name);
        break;
      case 'input_applied':
        turn.body.append(this.#userMessage(`input:${data.inputId}`));
        turn.open = null;
        break;
      case 'turn_interrupted':
        turn.body.append(h('p', { class: 'note', text: 'Interrupted by a new input.' }));
        turn.open = null;
        break;
      case 'error':
        turn.errorCode = data.code;
        turn.errorMessage = data.message;
        turn.body.append(h('p', { class: 'stream-error', text: data.code ? `${data.message} (${data.code})` : data.message }));
        turn.open = null;
        break;
      case 'result':
        this.#finish(turn, data);
        break;
      default:
        // turn_start, turn_end, usage and the patch messages are shown by the event inspector only.
        break;
    }
  }

  /** The turn of `requestId`, created on its first event. */
  #turn(requestId) {
    const existing = this.#turns.get(requestId);
    if (existing) {
      if (existing.fromTranscript) this.#reopen(existing);
      this.#last = existing;
      return existing;
    }
    const number = this.#turns.size + 1;
    const user = this.#userMessage(`request:${requestId}`);
    const body = h('div', { class: 'assistant' });
    const status = h('p', { class: 'turn-status', text: 'Running…' });
    const element = h(
      'article',
      { class: 'turn', 'aria-label': `Request ${number}`, 'aria-busy': 'true', dataset: { requestId, state: 'running' } },
      user,
      body,
      status,
    );
    const turn = { requestId, element, user, body, status, state: 'running', open: null, tools: new Map(), approvals: [], text: '' };
    this.#turns.set(requestId, turn);
    this.#last = turn;
    this.#root.append(element);
    if (!this.#starters.has(requestId)) this.#hooks.onUnknownInput?.(requestId);
    return turn;
  }

  /** A transcript turn whose events arrived after all: its body is rebuilt from them. */
  #reopen(turn) {
    turn.fromTranscript = false;
    turn.body.replaceChildren();
    turn.tools.clear();
    turn.open = null;
    turn.text = '';
    turn.state = 'running';
    turn.element.dataset.state = 'running';
    turn.element.setAttribute('aria-busy', 'true');
    turn.status.textContent = 'Running…';
  }

  #userMessage(key) {
    const [kind, id] = [key.slice(0, key.indexOf(':')), key.slice(key.indexOf(':') + 1)];
    const inputId = kind === 'input' ? id : this.#starters.get(id);
    const text = inputId === undefined ? undefined : this.#inputs.get(inputId);
    const paragraph = h('p', { class: 'text' });
    if (text === undefined) {
      paragraph.classList.add('pending');
      const waiting = this.#waiting.get(key) ?? [];
      waiting.push(paragraph);
      this.#waiting.set(key, waiting);
    } else {
      paragraph.textContent = text;
    }
    return h('div', { class: 'message user' }, h('span', { class: 'who', text: 'User' }), paragraph);
  }

  #fill(key, text) {
    for (const node of this.#waiting.get(key) ?? []) {
      node.textContent = text;
      node.classList.remove('pending', 'unknown');
    }
    this.#waiting.delete(key);
  }

  #appendText(turn, delta) {
    if (turn.open?.kind !== 'text') {
      const node = document.createTextNode('');
      turn.body.append(h('p', { class: 'message assistant-text' }, node));
      turn.open = { kind: 'text', node };
    }
    turn.open.node.appendData(delta);
    turn.text += delta;
  }

  #appendThinking(turn, delta) {
    if (turn.open?.kind !== 'thinking') {
      const node = document.createTextNode('');
      turn.body.append(h('details', { class: 'thinking' }, h('summary', { text: 'Thinking' }), h('p', {}, node)));
      turn.open = { kind: 'thinking', node };
    }
    turn.open.node.appendData(delta);
  }

  #toolUse(turn, { id, name, input }) {
    const status = h('span', { class: 'tool-status', text: 'running' });
    const { label, badge } = toolLabel(name, input);
    const element = h(
      'details',
      { class: 'tool', dataset: { state: 'running' } },
      h(
        'summary',
        {},
        h('span', { class: 'tool-name', text: label }),
        badge ? [' ', h('span', { class: 'tool-badge', text: badge })] : [],
        ' ',
        h('code', { text: preview(input, 60) }),
        ' ',
        status,
      ),
      h('p', { class: 'tool-label', text: 'Input' }),
      h('pre', { text: typeof input === 'string' ? input : pretty(input) }),
    );
    turn.body.append(element);
    turn.tools.set(id, { element, status, name });
    turn.open = null;
  }

  #toolNote(turn, { id, name }, text) {
    const tool = turn.tools.get(id) ?? this.#toolStub(turn, id, name);
    tool.status.textContent = text;
  }

  /** One call a subagent made (its tool's name, never its input), listed under its Task call. */
  #childActivity(turn, { id, name, progress }) {
    const tool = turn.tools.get(id) ?? this.#toolStub(turn, id, name);
    if (!tool.activity) {
      tool.activity = h('ul', { class: 'subagent-activity', 'aria-label': 'Subagent activity' });
      tool.element.append(tool.activity);
    }
    tool.activity.append(h('li', { text: progress.message ?? progress.data.name }));
  }

  #toolResult(turn, { id, name, output, display, isError }) {
    const tool = turn.tools.get(id) ?? this.#toolStub(turn, id, name);
    tool.element.dataset.state = isError ? 'error' : 'done';
    tool.status.textContent = display?.summary ?? (isError ? 'failed' : 'done');
    tool.element.append(h('p', { class: 'tool-label', text: isError ? 'Error' : 'Result' }), h('pre', { text: typeof output === 'string' ? output : pretty(output) }));
    for (const approval of turn.approvals) {
      // A subagent's prompts (titled `[agent] …`) end with its Task call.
      if (approval.child && name === 'Task') this.#settle(approval);
      if (approval.toolName === name && !approval.child) this.#settle(approval, decisionShown(approval, turn, { name, output, isError }));
    }
  }

  #toolStub(turn, id, name) {
    this.#toolUse(turn, { id, name, input: null });
    return turn.tools.get(id);
  }

  #permission(data) {
    const turn = this.#last?.state === 'running' ? this.#last : null;
    const id = data.permissionRequestId;
    const titleId = `approval-${id}-title`;
    const messageId = `approval-${id}-message`;
    const approval = { id, toolName: data.toolName, kind: data.kind ?? 'permission', child: /^\[[^\]]+\] /.test(data.title ?? ''), choice: null, settled: false };
    const questions = data.kind === 'question' && Array.isArray(data.input?.questions) ? data.input.questions : null;
    // A question asks for answers, sent as `reason` (JSON `{"answers": {header: label(s)}}`).
    const form = questions ? questionForm(id, questions) : null;
    // A plan (`ExitPlanMode`) is shown whole; rejecting it may say why (`reason`).
    const plan = data.kind === 'plan' ? planView(id, data.input) : null;
    const choices = form
      ? [
          ['answer', 'Send answers', () => ({ approved: true, reason: JSON.stringify({ answers: form.answers() }) })],
          ['deny decline', 'Decline', () => ({ approved: false })],
        ]
      : plan
      ? [
          ['approve', 'Approve', () => ({ approved: true, scope: 'once' })],
          ['deny', 'Reject', () => ({ approved: false, reason: plan.feedback() })],
        ]
      : [
          ['approve', 'Approve', () => ({ approved: true, scope: 'once' })],
          ['deny', 'Deny', () => ({ approved: false })],
          ['session', 'Approve for session', () => ({ approved: true, scope: 'session' })],
        ];
    approval.buttons = choices.map(([choice, label, decision]) =>
      h('button', {
        type: 'button',
        class: `decision ${choice}`,
        text: label,
        onclick: () => this.#decide(approval, choice.split(' ').pop(), decision()),
      }),
    );
    approval.state = h('p', { class: 'approval-state', role: 'status', tabindex: '-1' });
    const facts = (form || plan ? [] : [
      ['Tool', data.toolName],
      ['Input', preview(data.input, 200)],
      ['Paths', data.affectedPaths.join(', ')],
      ['Risks', data.risks.join(', ')],
    ]).filter(([, value]) => value);
    approval.element = h(
      'section',
      { class: 'approval', role: 'group', 'aria-labelledby': titleId, 'aria-describedby': messageId, dataset: { state: 'pending', kind: data.kind ?? 'permission' } },
      h('h3', { id: titleId, text: data.title }),
      h('p', { id: messageId, text: form ? 'The agent asks:' : data.message }),
      form?.element,
      plan?.element,
      h('dl', {}, facts.map(([term, value]) => [h('dt', { text: term }), h('dd', { text: value })])),
      h('div', { class: 'actions' }, approval.buttons),
      approval.state,
    );
    (turn ? turn.body : this.#root).append(approval.element);
    if (turn) {
      turn.approvals.push(approval);
      turn.open = null;
    }
    this.#approvals.set(id, approval);
    this.#hooks.onApproval?.(approval);
  }

  #decide(approval, choice, decision) {
    if (approval.settled) return;
    approval.choice = choice;
    for (const button of approval.buttons) button.disabled = true;
    approval.state.textContent = 'Sending…';
    this.#hooks.onDecision(approval.id, decision).then(
      () => this.#settle(approval),
      (error) => {
        if (error?.code === 'PERMISSION_NOT_FOUND') {
          approval.choice = null;
          this.#settle(approval, 'No longer pending');
          return;
        }
        approval.choice = null;
        for (const button of approval.buttons) button.disabled = false;
        approval.state.textContent = `Not sent: ${describeError(error)}`;
      },
    );
  }

  /** Ends a prompt: by this page's decision, by what followed it, or because its request ended. */
  #settle(approval, fallback = 'Answered') {
    if (approval.settled) return;
    approval.settled = true;
    const hadFocus = approval.element.contains(document.activeElement);
    for (const button of approval.buttons) button.remove();
    for (const input of approval.element.querySelectorAll('input, textarea')) input.disabled = true;
    approval.element.dataset.state = 'settled';
    approval.state.textContent = approval.choice ? OUTCOMES[approval.choice] : fallback;
    if (hadFocus) approval.state.focus();
    this.#approvals.delete(approval.id);
  }

  #finish(turn, data) {
    if (!turn.text && typeof data.content === 'string' && data.content) this.#appendText(turn, data.content);
    if (data.subtype === 'success') {
      this.#end(turn, 'done', 'Done');
    } else {
      const label = turn.errorCode === 'REQUEST_ABORTED' ? 'Aborted' : 'Failed';
      // The error event, when there was one, already said why.
      const why = typeof data.error === 'string' && data.error !== turn.errorMessage ? data.error : '';
      this.#end(turn, 'error', why ? `${label}: ${why}` : label);
    }
  }

  #end(turn, state, label) {
    turn.state = state;
    turn.open = null;
    turn.element.dataset.state = state;
    turn.element.setAttribute('aria-busy', 'false');
    turn.status.textContent = label;
    for (const approval of turn.approvals) this.#settle(approval, 'No longer pending');
  }

  #close(data) {
    this.#closed = true;
    for (const approval of [...this.#approvals.values()]) this.#settle(approval, 'No longer pending');
    const reason = typeof data?.reason === 'string' ? ` (${data.reason})` : '';
    this.#root.append(h('p', { class: 'notice', text: `Session closed${reason}.` }));
  }
}

/**
 * The answer form of an `AskUserQuestion` prompt: one group per question, radio buttons (or
 * checkboxes for `multiSelect`) for its options. `answers()` maps each header to the chosen
 * label (a list for `multiSelect`); unanswered questions are left out.
 */
/**
 * How a tool call is labelled: an MCP tool (`mcp__<server>__<tool>`) by its own name with its
 * server as a badge, `Task` with the subagent it starts, anything else by its name.
 */
function toolLabel(name, input) {
  const mcp = /^mcp__(.+?)__(.+)$/.exec(name ?? '');
  if (mcp) return { label: mcp[2], badge: `MCP · ${mcp[1]}` };
  if (name === 'Task') {
    let args = input;
    if (typeof args === 'string') {
      try {
        args = JSON.parse(args);
      } catch {
        args = null;
      }
    }
    const kind = typeof args?.subagent_type === 'string' ? args.subagent_type : null;
    return { label: name, badge: kind ? `subagent · ${kind}` : null };
  }
  return { label: name, badge: null };
}

function questionForm(id, questions) {
  const groups = questions.map((question, index) => {
    const name = `question-${id}-${index}`;
    const type = question.multiSelect ? 'checkbox' : 'radio';
    const options = (Array.isArray(question.options) ? question.options : []).map((option) => {
      const input = h('input', { type, name, value: String(option.label ?? '') });
      return { input, element: h('label', { class: 'question-option' }, input, ` ${option.label ?? ''}`, option.description ? h('small', { text: ` — ${option.description}` }) : null) };
    });
    const element = h(
      'fieldset',
      { class: 'question' },
      h('legend', { text: `${question.header ?? ''}: ${question.question ?? ''}` }),
      options.map((option) => option.element),
    );
    return { question, options, element };
  });
  return {
    element: h('div', { class: 'questions' }, groups.map((group) => group.element)),
    answers() {
      const answers = {};
      for (const { question, options } of groups) {
        const chosen = options.filter((option) => option.input.checked).map((option) => option.input.value);
        if (chosen.length === 0) continue;
        answers[question.header] = question.multiSelect ? chosen : chosen[0];
      }
      return answers;
    },
  };
}

/** A plan to approve: its Markdown text as written, and a feedback field for a rejection. */
function planView(id, input) {
  const feedbackId = `plan-${id}-feedback`;
  const feedback = h('textarea', { id: feedbackId, rows: '2', class: 'plan-feedback' });
  const text = typeof input?.plan === 'string' ? input.plan : '';
  return {
    element: h(
      'div',
      { class: 'plan' },
      text ? h('pre', { class: 'plan-text', text }) : null,
      h('label', { for: feedbackId, text: 'Feedback if you reject (optional)' }),
      feedback,
    ),
    feedback: () => feedback.value.trim() || undefined,
  };
}
