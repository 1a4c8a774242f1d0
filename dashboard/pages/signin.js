// The sign-in page: every unauthenticated visit ends here.
import { post } from '../lib/api.js';
import { h, fill, field } from '../lib/dom.js';

export function render(main, { onSignedIn }) {
  const email = h('input', { type: 'email', autocomplete: 'username', required: true, id: 'signin-email' });
  const password = h('input', { type: 'password', autocomplete: 'current-password', required: true, id: 'signin-password' });
  const message = h('p', { role: 'alert', class: 'error' });
  const button = h('button', { type: 'submit' }, 'Sign in');
  const form = h('form', { class: 'signin', onsubmit: async (e) => {
    e.preventDefault();
    button.disabled = true;
    message.textContent = '';
    try {
      await post('/api/auth/login', { email: email.value, password: password.value });
      onSignedIn();
    } catch (err) {
      message.textContent = err.status === 401 ? 'Wrong email or password.' : err.message;
      button.disabled = false;
      password.focus();
    }
  } }, field('Email', email), field('Password', password), button, message);
  fill(main, h('h1', {}, 'Sign in to spendgate'), form,
    h('p', { class: 'hint' }, 'Operators create accounts with ', h('code', {}, 'spendgate user create'), '.'));
  email.focus();
}
