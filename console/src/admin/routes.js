// The operator's pages: main.js lists them in the navigation of admins and
// lazy-loads each module (its default export is the page) in a chunk of its
// own, so renters never download them. Only the navigation's labels are
// registered here, in the first load.
import { addMessages } from '../lib/i18n.js';

addMessages({
  en: {
    'admin.nav.hosts': 'Hosts',
    'admin.nav.joinTokens': 'Join tokens',
    'admin.nav.verifications': 'Verification queue',
    'admin.nav.users': 'Users & credit',
    'admin.nav.gpuModels': 'GPU models & prices',
    'admin.nav.prices': 'Price history',
    'admin.nav.images': 'Images',
    'admin.nav.usage': 'Usage & revenue',
  },
  zh: {
    'admin.nav.hosts': '主机',
    'admin.nav.joinTokens': '加入令牌',
    'admin.nav.verifications': '实名审核',
    'admin.nav.users': '用户与充值',
    'admin.nav.gpuModels': 'GPU 型号与价格',
    'admin.nav.prices': '价格历史',
    'admin.nav.images': '镜像',
    'admin.nav.usage': '用量与收入',
  },
});

export const adminRoutes = [
  { path: '/admin/hosts', nav: 'admin.nav.hosts', load: () => import('./hosts.js') },
  { path: '/admin/join-tokens', nav: 'admin.nav.joinTokens', load: () => import('./join-tokens.js') },
  { path: '/admin/verifications', nav: 'admin.nav.verifications', load: () => import('./verifications.js') },
  { path: '/admin/users', nav: 'admin.nav.users', load: () => import('./users.js') },
  { path: '/admin/gpu-models', nav: 'admin.nav.gpuModels', load: () => import('./gpu-models.js') },
  { path: '/admin/prices', nav: 'admin.nav.prices', load: () => import('./prices.js') },
  { path: '/admin/images', nav: 'admin.nav.images', load: () => import('./images.js') },
  { path: '/admin/usage', nav: 'admin.nav.usage', load: () => import('./usage.js') },
];
