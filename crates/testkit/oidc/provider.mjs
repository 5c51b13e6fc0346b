// The OpenID Provider of the hub's sign-in tests: npm's `oidc-provider` (pinned in
// package-lock.json, installed by `.ci/setup` with `npm ci`) on 127.0.0.1, started by
// crates/testkit/src/oidc.rs. Its development interactions show a login form that takes any
// login and password, then a consent page; the accounts below give the login's e-mail and
// groups, which the provider puts in the ID token.
//
//   node provider.mjs PORT REDIRECT_URI CLIENT_SECRET
//
// Prints "listening <issuer>" once it answers.
import Provider from 'oidc-provider';

const [port, redirectUri, clientSecret] = process.argv.slice(2);
if (!port || !redirectUri || !clientSecret) {
  console.error('usage: node provider.mjs PORT REDIRECT_URI CLIENT_SECRET');
  process.exit(2);
}
const issuer = `http://127.0.0.1:${port}`;

// login -> claims. Any other login signs in with no e-mail and no groups.
const ACCOUNTS = {
  ana: { email: 'ana@contoso.com', email_verified: true, groups: ['platform-admins'] },
  lea: { email: 'lea@contoso.com', email_verified: true, groups: ['platform-leads'] },
  vic: { email: 'vic@contoso.com', email_verified: true, groups: ['developers'] },
};

const provider = new Provider(issuer, {
  clients: [
    {
      client_id: 'kalypso-hub',
      client_secret: clientSecret,
      redirect_uris: [redirectUri],
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    },
  ],
  claims: {
    openid: ['sub'],
    email: ['email', 'email_verified'],
    groups: ['groups'],
  },
  // The claims of the scopes asked for go into the ID token, not only the userinfo endpoint.
  conformIdTokenClaims: false,
  pkce: { required: () => true },
  features: { devInteractions: { enabled: true } },
  cookies: { keys: ['kalypso-test-provider-cookie-key'] },
  async findAccount(_ctx, id) {
    return {
      accountId: id,
      async claims() {
        return { sub: id, ...(ACCOUNTS[id] ?? {}) };
      },
    };
  },
});
provider.proxy = false;

provider.listen(Number(port), '127.0.0.1', () => {
  console.log(`listening ${issuer}`);
});
