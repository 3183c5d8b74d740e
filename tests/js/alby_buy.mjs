// Buys calls from one URL with Alby's lightning-tools (fetchWithL402 or fetchWithMpp),
// whose wallet pays through the dev node (POST /api/dev/pay).
//
// node alby_buy.mjs <l402|mpp> <url> <dev-pay-url> <json body> [<json body> ...]
//
// Each body is POSTed to <url> in turn; fetchWithMpp's requests declare
// `Accept-Payment: lightning/charge`, as a client that pays only the charge intent does.
// Prints one JSON line per call: {status, receipt, body, paid: [invoices paid],
// authorization: [the scheme of each Authorization sent]}.
import { fetchWithL402 } from '@getalby/lightning-tools/402/l402'
import { fetchWithMpp } from '@getalby/lightning-tools/402/mpp'

const [mode, url, devPayUrl, ...bodies] = process.argv.slice(2)
const rawFetch = globalThis.fetch
const paid = []
const authorization = []

// Alby's helpers call the global fetch: record the scheme each request authorized with.
globalThis.fetch = (input, init) => {
  const auth = new Headers(init?.headers).get('authorization')
  if (auth) authorization.push(auth.split(' ', 1)[0])
  return rawFetch(input, init)
}

const wallet = {
  async payInvoice({ invoice }) {
    const resp = await rawFetch(devPayUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ invoice }),
    })
    if (!resp.ok) throw new Error(`the dev node did not pay: ${resp.status} ${await resp.text()}`)
    paid.push(invoice)
    const { preimage } = await resp.json()
    return { preimage }
  },
}

const pay = mode === 'mpp' ? fetchWithMpp : fetchWithL402
for (const body of bodies) {
  paid.length = 0
  authorization.length = 0
  const headers = { 'content-type': 'application/json' }
  if (mode === 'mpp') headers['accept-payment'] = 'lightning/charge'
  const resp = await pay(url, { method: 'POST', headers, body }, { wallet })
  const text = await resp.text()
  let parsed
  try {
    parsed = JSON.parse(text)
  } catch {
    parsed = text
  }
  console.log(
    JSON.stringify({
      status: resp.status,
      receipt: resp.headers.get('payment-receipt'),
      body: parsed,
      paid: [...paid],
      authorization: [...authorization],
    }),
  )
}
