// Stands in for @ixo/impactxclient-sdk 3.0.0. @ixo/oracles-chain-client 2.1.2 imports these
// names when the client SDK loads (authz, payments, claims, entities), but the oracle hooks
// never call into them: every use of one throws, so a test that reached the chain fails.

function unavailable(name) {
  const fail = (what) => {
    throw new Error(`placeholder @ixo/impactxclient-sdk: ${what} was used`);
  };
  return new Proxy(function placeholder() {}, {
    get(_target, property) {
      // Probes by the module loader and by `await`, which are not uses.
      if (property === "then" || typeof property === "symbol") return undefined;
      return fail(`${name}.${property}`);
    },
    apply: () => fail(`${name}()`),
    construct: () => fail(`new ${name}()`),
  });
}

export const cosmos = unavailable("cosmos");
export const createQueryClient = unavailable("createQueryClient");
export const createRegistry = unavailable("createRegistry");
export const createSigningClient = unavailable("createSigningClient");
export const customMessages = unavailable("customMessages");
export const ixo = unavailable("ixo");
export const utils = unavailable("utils");
