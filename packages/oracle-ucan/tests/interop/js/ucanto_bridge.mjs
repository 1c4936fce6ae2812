// The ucanto side of the oracle-ucan interoperability tests.
//
// Reads a JSON array of requests on stdin and prints a JSON array of responses, one per
// request and in the same order, so one Node process serves a whole test module.
//
// Request:  {"id": "<name>", "op": "<operation>", ...arguments}
// Response: {"id": "<name>", "ok": <value>} or {"id": "<name>", "error": "<message>"}
//
// "error" means the helper itself failed (bad request, ucanto threw); a ucanto validator
// refusing a token is a normal result: {"ok": {"valid": false, "name": ..., "message": ...}}.
//
// Values travel as JSON with two IPLD forms (the DAG-JSON ones): bytes are
// {"/": {"bytes": "<unpadded base64>"}} and links are {"/": "<cid>"}. A string "@<id>"
// where a token is expected names the token of an earlier request of the same batch.
//
// Operations:
//   principal {seed?: hex, mnemonic?: str, key?: "M…", did?: str}
//       -> {did, key_did, format|null}     (mnemonic: ed25519.derive(sha256(utf8(m.trim()))))
//   delegate  {issuer, audience, capabilities, expiration, not_before?, nonce?, facts?, proofs?}
//   invoke    {issuer, audience, capability, expiration, not_before?, nonce?, facts?, proofs?}
//       issuer is a principal request; expiration null means never (ucanto: Infinity).
//       -> a described delegation (see describe below)
//   roundtrip {token} -> Delegation.extract then archive: a described delegation
//   claim     {token, mode: "access"|"claim", can, caveat: "default"|"limit",
//              authority: {key, did?}, root_issuers: [did], did_keys: {did: [did:key]}}
//       -> {valid: true, can, with, nb, chain: [issuer dids, invoker first]}
//        | {valid: false, name, message}      (name "Thrown" when the validator threw)

import { createHash } from 'node:crypto'
import { ed25519, Verifier } from '@ucanto/principal'
import { delegate, invoke, Delegation, UCAN, parseLink, isLink } from '@ucanto/core'
import {
  capability,
  access,
  claim,
  Schema,
  DIDResolutionError,
  ok,
  fail,
} from '@ucanto/validator'

const fromHex = hex => Uint8Array.from(Buffer.from(hex, 'hex'))
const toHex = bytes => Buffer.from(bytes).toString('hex')
const toBase64 = bytes => Buffer.from(bytes).toString('base64')
const fromBase64 = text => Uint8Array.from(Buffer.from(text, 'base64'))

/** JSON (with the IPLD bytes and link forms) -> JavaScript values. */
const revive = value => {
  if (Array.isArray(value)) return value.map(revive)
  if (value === null || typeof value !== 'object') return value
  const keys = Object.keys(value)
  if (keys.length === 1 && keys[0] === '/') {
    const inner = value['/']
    if (typeof inner === 'string') return parseLink(inner)
    if (inner && typeof inner === 'object' && typeof inner.bytes === 'string') {
      return fromBase64(inner.bytes)
    }
  }
  return Object.fromEntries(keys.map(key => [key, revive(value[key])]))
}

/** JavaScript values -> JSON (with the IPLD bytes and link forms). */
const wire = value => {
  if (value instanceof Uint8Array) {
    return { '/': { bytes: toBase64(value).replace(/=+$/, '') } }
  }
  if (isLink(value)) return { '/': value.toString() }
  if (Array.isArray(value)) return value.map(wire)
  if (value === Infinity) return null
  if (value === null || typeof value !== 'object') return value
  return Object.fromEntries(Object.keys(value).map(key => [key, wire(value[key])]))
}

const signers = new Map()

const principal = async ({ seed, mnemonic, key, did }) => {
  let signer
  if (seed !== undefined) {
    signer = signers.get(seed) ?? (await ed25519.derive(fromHex(seed)))
    signers.set(seed, signer)
  } else if (mnemonic !== undefined) {
    // @ixo/ucan's signerFromMnemonic
    const secret = createHash('sha256').update(mnemonic.trim(), 'utf8').digest()
    signer = await ed25519.derive(new Uint8Array(secret))
  } else if (key !== undefined) {
    signer = ed25519.parse(key)
  } else {
    throw new Error('a principal needs seed, mnemonic or key')
  }
  return did === undefined ? signer : signer.withDID(did)
}

const describePrincipal = signer => ({
  did: signer.did(),
  key_did: signer.toDIDKey(),
  // a signer re-addressed with withDID has no private-key text of its own
  format: typeof signer.encode === 'function' ? ed25519.format(signer) : null,
})

/** Everything a test compares about a delegation, read back through ucanto. */
const describe = async delegation => {
  const archived = await delegation.archive()
  if (archived.error) throw archived.error
  const data = delegation.data
  return {
    token: toBase64(archived.ok),
    cid: delegation.cid.toString(),
    block: toHex(delegation.root.bytes),
    blocks: [...delegation.export()].map(block => [block.cid.toString(), toHex(block.bytes)]),
    version: delegation.version,
    issuer: delegation.issuer.did(),
    audience: delegation.audience.did(),
    capabilities: wire(delegation.capabilities),
    expiration: data.expiration === Infinity ? null : data.expiration,
    not_before: delegation.notBefore ?? null,
    nonce: delegation.nonce ?? null,
    facts: wire(delegation.facts),
    proofs: delegation.proofs.map(proof => (isLink(proof) ? proof : proof.cid).toString()),
  }
}

const tokens = new Map()

const load = async token => {
  const text = token.startsWith('@') ? tokens.get(token.slice(1)) : token
  if (text === undefined) throw new Error(`no earlier token ${token}`)
  const extracted = await Delegation.extract(fromBase64(text))
  if (extracted.error) throw extracted.error
  return extracted.ok
}

const options = async request => ({
  issuer: await principal(request.issuer),
  audience: { did: () => request.audience },
  expiration: request.expiration === null ? Infinity : request.expiration,
  notBefore: request.not_before ?? undefined,
  nonce: request.nonce ?? undefined,
  facts: revive(request.facts ?? []),
  proofs: await Promise.all((request.proofs ?? []).map(load)),
})

/** `claimed.nb.limit` must not exceed the delegated one (resource rule as ucanto's default). */
const limitDerives = (claimed, delegated) => {
  if (delegated.with.endsWith('*')) {
    if (!claimed.with.startsWith(delegated.with.slice(0, -1))) {
      return fail(`Resource ${claimed.with} does not match delegated ${delegated.with}`)
    }
  } else if (delegated.with !== claimed.with) {
    return fail(`Resource ${claimed.with} is not contained by ${delegated.with}`)
  }
  const granted = delegated.nb.limit
  const asked = claimed.nb.limit
  if (granted !== undefined && (asked === undefined || asked > granted)) {
    return fail(`limit ${asked} exceeds the delegated ${granted}`)
  }
  return ok({})
}

const chainOf = authorization => {
  const issuers = [authorization.delegation.issuer.did()]
  for (const proof of authorization.proofs) issuers.push(...chainOf(proof))
  return issuers
}

const check = async request => {
  const token = await load(request.token)
  const definition =
    request.caveat === 'limit'
      ? capability({
          can: request.can,
          with: Schema.string(),
          nb: Schema.struct({ limit: Schema.integer().optional() }),
          derives: limitDerives,
        })
      : capability({ can: request.can, with: Schema.string() })
  const { key, did } = request.authority
  const authority = did === undefined ? Verifier.parse(key) : Verifier.parse(key).withDID(did)
  const roots = request.root_issuers
  const didKeys = request.did_keys ?? {}
  // The options @ixo/ucan passes to the validator.
  const config = {
    authority,
    principal: Verifier,
    canIssue: (claimed, issuer) => roots.includes(issuer) || claimed.with === issuer,
    resolveDIDKey: did =>
      didKeys[did] ? { ok: didKeys[did] } : { error: new DIDResolutionError(did) },
    validateAuthorization: () => ({ ok: {} }),
  }
  let result
  try {
    result =
      request.mode === 'claim'
        ? await claim(definition, [token], config)
        : await access(token, { capability: definition, ...config })
  } catch (error) {
    // The validator throws instead of refusing on some malformed input (e.g. a signature
    // whose R is not a curve point, from @noble/ed25519); that is a refusal too.
    return { valid: false, name: 'Thrown', message: String(error?.message ?? error) }
  }
  if (result.error) {
    return { valid: false, name: result.error.name, message: result.error.message }
  }
  const parsed = result.ok.capability
  return {
    valid: true,
    can: parsed.can,
    with: parsed.with,
    nb: wire(parsed.nb),
    chain: chainOf(result.ok),
  }
}

const operations = {
  principal: async request => describePrincipal(await principal(request)),
  delegate: async request =>
    describe(
      await delegate({
        ...(await options(request)),
        capabilities: revive(request.capabilities),
      })
    ),
  invoke: async request =>
    describe(
      await invoke({
        ...(await options(request)),
        capability: revive(request.capability),
      }).delegate()
    ),
  roundtrip: async request => describe(await load(request.token)),
  claim: check,
}

const read = async () => {
  const chunks = []
  for await (const chunk of process.stdin) chunks.push(chunk)
  return JSON.parse(Buffer.concat(chunks).toString('utf8'))
}

const responses = []
for (const request of await read()) {
  try {
    const operation = operations[request.op]
    if (!operation) throw new Error(`unknown op ${request.op}`)
    const value = await operation(request)
    if (typeof value?.token === 'string') tokens.set(request.id, value.token)
    responses.push({ id: request.id, ok: value })
  } catch (error) {
    responses.push({ id: request.id, error: String(error?.stack ?? error) })
  }
}
process.stdout.write(JSON.stringify(responses))
