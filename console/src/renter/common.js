// What the renter's instance pages share: state badges, labels, countdowns.
import { html } from '../lib/ui.js';
import { t, addMessages } from '../lib/i18n.js';
import { fmtDuration } from '../lib/format.js';

addMessages({
  en: {
    'st.creating': 'creating', 'st.copying': 'copying', 'st.migrating': 'migrating', 'st.running': 'running',
    'st.stopping': 'stopping', 'st.stopped': 'stopped', 'st.starting': 'starting', 'st.releasing': 'releasing',
    'st.released': 'released', 'st.failed': 'failed', 'st.host_lost': 'host lost',
    'mode.gpu': 'GPU', 'mode.nogpu': 'no GPU',
    'plan.payg': 'pay as you go', 'plan.day': 'daily', 'plan.week': 'weekly', 'plan.month': 'monthly',
    'inst.release_in': 'released in {d}',
    'inst.stop_in': 'stops in {d}',
    'inst.plan_ends': 'plan ends in {d}',
  },
  zh: {
    'st.creating': '创建中', 'st.copying': '复制中', 'st.migrating': '迁移中', 'st.running': '运行中',
    'st.stopping': '关机中', 'st.stopped': '已关机', 'st.starting': '开机中', 'st.releasing': '释放中',
    'st.released': '已释放', 'st.failed': '失败', 'st.host_lost': '主机失联',
    'mode.gpu': '有卡', 'mode.nogpu': '无卡',
    'plan.payg': '按量', 'plan.day': '包日', 'plan.week': '包周', 'plan.month': '包月',
    'inst.release_in': '{d} 后释放',
    'inst.stop_in': '{d} 后关机',
    'inst.plan_ends': '{d} 后套餐到期',
  },
});

const kinds = {
  running: 'ok', stopped: 'muted', failed: 'bad', host_lost: 'bad', released: 'muted',
  creating: 'info', copying: 'info', migrating: 'info', starting: 'info', stopping: 'warn', releasing: 'warn',
};

export function stateBadge(inst) {
  return html`<span class=${'badge ' + (kinds[inst.state] || 'muted')}>${t('st.' + inst.state)}</span>`;
}

export function secondsUntil(iso, now) {
  if (!iso) return null;
  return Math.max(0, (Date.parse(iso) - now) / 1000);
}

// The clocks that matter, soonest first: auto-release, scheduled stop, plan end.
export function countdowns(inst, now) {
  const out = [];
  const r = secondsUntil(inst.release_at, now);
  if (r !== null) out.push(t('inst.release_in', { d: fmtDuration(r) }));
  const s = secondsUntil(inst.stop_at, now);
  if (s !== null) out.push(t('inst.stop_in', { d: fmtDuration(s) }));
  const p = secondsUntil(inst.plan_expires_at, now);
  if (p !== null) out.push(t('inst.plan_ends', { d: fmtDuration(p) }));
  return out;
}

export const isLive = (s) => s !== 'released';

// A state's words in the current language ("" stays "", an unknown one as is).
export function stateText(s) {
  if (!s) return '';
  const w = t('st.' + s);
  return w === 'st.' + s ? s : w;
}
