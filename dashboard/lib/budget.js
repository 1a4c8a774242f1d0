// A budget at a glance: a usage bar (settled spend and the holds of calls in flight
// against the limit, thresholds marked; a meter to assistive technology), when the
// period ends, and when the limit is reached at the current period's pace. Money
// stays integer microdollars; only the pace, a forecast, is a float.
import { h, time } from './dom.js';
import { usd, usdInput } from './money.js';
import { entityName } from './names.js';

const DAY_MS = 86400000;

/** Spend plus holds over the limit, as a whole percent (may pass 100). */
export function usedPercent(b) {
  if (!b.maxBudgetMicrodollars) return 0;
  return Math.floor(((b.spendMicrodollars + (b.reservedMicrodollars || 0)) * 100) / b.maxBudgetMicrodollars);
}

/** Share of the limit used, for ordering: nearest their limit first. */
export function usedShare(b) {
  return (b.spendMicrodollars + (b.reservedMicrodollars || 0)) / Math.max(1, b.maxBudgetMicrodollars);
}

/**
 * Where the current pace leads: `{ kind, at?, projected? }`.
 * - `reached`: spend and holds are at or past the limit;
 * - `idle`: nothing spent yet this period;
 * - `before_end`: the limit is reached at `at`, before the period ends;
 * - `lasts`: the period ends first, with about `projected` spent;
 * - `at`: no reset interval, the limit is reached at `at`.
 * The period counts from `currentPeriodStart`, or from the budget's creation when it
 * has no reset interval.
 */
export function projection(b, now = Date.now()) {
  const used = b.spendMicrodollars + (b.reservedMicrodollars || 0);
  if (used >= b.maxBudgetMicrodollars) return { kind: 'reached' };
  const start = Date.parse(b.currentPeriodStart || b.createdAt);
  const elapsed = Math.max(now - start, 60000);
  if (b.spendMicrodollars <= 0) return { kind: 'idle' };
  const pace = b.spendMicrodollars / elapsed; // microdollars per millisecond
  const at = now + (b.maxBudgetMicrodollars - used) / pace;
  const end = b.currentPeriodEnd ? Date.parse(b.currentPeriodEnd) : null;
  if (end === null) return { kind: 'at', at };
  if (at < end) return { kind: 'before_end', at };
  return { kind: 'lasts', projected: Math.round(b.spendMicrodollars + pace * (end - now)) };
}

function day(ms) {
  const d = new Date(ms);
  return h('time', { datetime: d.toISOString() }, d.toISOString().slice(0, 16).replace('T', ' ') + ' UTC');
}

/** The projection as a sentence. */
export function projectionText(b, now = Date.now()) {
  const p = projection(b, now);
  switch (p.kind) {
    case 'reached': return h('strong', { class: 'bad' }, 'Limit reached');
    case 'idle': return 'Nothing spent yet this period';
    case 'before_end': return h('span', { class: p.at - now < DAY_MS ? 'bad' : 'warn' }, 'Runs out ', day(p.at), ' at this pace');
    case 'lasts': return ['Lasts the period at this pace (about ', usd(p.projected), ' by its end)'];
    default: return ['Runs out ', day(p.at), ' at this pace'];
  }
}

/**
 * The usage bar: a meter (role="meter", its value the spend and holds against the
 * limit, in dollars) named after its budget's entity, whose numbers are also its text.
 * A screen reader hears "API key agent budget, $1.20 of $5.00 spent (24%)".
 */
export function usageBar(b, names) {
  const limit = Math.max(1, b.maxBudgetMicrodollars);
  const held = b.reservedMicrodollars || 0;
  const pct = (v) => `${Math.min(100, (v * 100) / limit).toFixed(2)}%`;
  const used = usedPercent(b);
  const level = used >= 100 ? 'over' : used >= Math.max(80, ...(b.thresholdPercentages || []).filter((t) => t < 100), 0) ? 'near' : 'ok';
  const [kind, name] = entityName(b, names);
  const max = Math.max(0, b.maxBudgetMicrodollars);
  // A meter's value stays within its range; past the limit the text tells by how much.
  const now = Math.min(max, Math.max(0, b.spendMicrodollars + held));
  const track = h('div', { class: `bar ${level}`, role: 'meter',
    'aria-label': `${kind} ${name || b.entityId} budget`,
    'aria-valuemin': '0', 'aria-valuemax': usdInput(max), 'aria-valuenow': usdInput(now),
    'aria-valuetext': held
      ? `${usd(b.spendMicrodollars)} spent and ${usd(held)} held of ${usd(b.maxBudgetMicrodollars)} (${used}%)`
      : `${usd(b.spendMicrodollars)} of ${usd(b.maxBudgetMicrodollars)} spent (${used}%)` },
  h('span', { class: 'spent', 'data-width': pct(b.spendMicrodollars) }),
  h('span', { class: 'held', 'data-width': pct(held), 'data-left': pct(b.spendMicrodollars) }),
  (b.thresholdPercentages || []).filter((t) => t < 100).map((t) => h('span', { class: 'threshold', 'data-left': `${t}%`, title: `${t}% threshold` })));
  // Widths are set through the CSSOM: the strict policy allows no inline style attribute.
  for (const el of track.querySelectorAll('[data-width], [data-left]')) {
    if (el.dataset.width) el.style.width = el.dataset.width;
    if (el.dataset.left) el.style.left = el.dataset.left;
  }
  return h('div', { class: 'usage' }, track,
    h('p', { class: 'usage-text' },
      h('span', { class: 'spent-text' }, usd(b.spendMicrodollars)), ' spent',
      held ? [' + ', h('span', { class: 'held-text' }, usd(held)), ' held by calls in flight'] : null,
      ' of ', h('span', { class: 'limit-text' }, usd(b.maxBudgetMicrodollars)), ` · ${used}%`,
      b.thresholdPercentages?.length ? h('span', { class: 'muted' }, ` · thresholds ${b.thresholdPercentages.join(', ')}%`) : null));
}

/** Period end and projection, one line each. */
export function periodLines(b) {
  return [
    h('p', { class: 'period' }, b.currentPeriodEnd ? ['Resets ', time(b.currentPeriodEnd)] : 'No reset interval'),
    h('p', { class: 'projection' }, projectionText(b)),
  ];
}

/** One budget as a card: whose it is, its bar, period end and projection. */
export function budgetCard(b, names) {
  const [kind, name] = entityName(b, names);
  const who = b.entityType === 'api_key' ? h('a', { href: `/keys/${b.entityId}` }, name || b.entityId)
    : b.entityType === 'customer' ? h('a', { href: `/customers/${encodeURIComponent(b.entityId)}` }, b.entityId)
      : (name || b.entityId);
  return h('li', { class: 'budget-card', 'data-budget': b.id },
    h('h3', {}, h('span', { class: 'muted' }, `${kind} `), who), usageBar(b, names), periodLines(b));
}
