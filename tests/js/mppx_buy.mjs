// Buys calls from one URL with mppx (the MPP TypeScript SDK), through its core client
// and a lightning charge method whose payer is the dev node (POST /api/dev/pay).
//
// node mppx_buy.mjs <url> <dev-pay-url> <json body> [<json body> ...]
//
// Each body is POSTed to <url> with mppx's payment-aware fetch, one after the other.
// Prints one JSON line per call: {status, receipt, body, paid: [invoices paid],
// acceptPayment: [the Accept-Payment of each request sent], challenges: [the joined
// WWW-Authenticate of each 402 received]}.
import { Credential, Method, z } from 'mppx'
import { Mppx } from 'mppx/client'

const [url, devPayUrl, ...bodies] = process.argv.slice(2)

// The lightning charge as draft-lightning-charge-00 describes it: the request names a
// BOLT11 invoice; the credential's payload is the preimage.
const lightningCharge = Method.from({
  name: 'lightning',
  intent: 'charge',
  schema: {
    credential: { payload: z.object({ preimage: z.string() }) },
    request: z.object({
      amount: z.string(),
      currency: z.string(),
      description: z.optional(z.string()),
      methodDetails: z.object({
        invoice: z.string(),
        paymentHash: z.optional(z.string()),
        network: z.optional(z.string()),
      }),
    }),
  },
})

const paid = []
const rawFetch = globalThis.fetch

const lightning = Method.toClient(lightningCharge, {
  async createCredential({ challenge }) {
    const invoice = challenge.request.methodDetails.invoice
    const resp = await rawFetch(devPayUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ invoice }),
    })
    if (!resp.ok) throw new Error(`the dev node did not pay: ${resp.status} ${await resp.text()}`)
    const { preimage } = await resp.json()
    paid.push(invoice)
    return Credential.serialize(Credential.from({ challenge, payload: { preimage } }))
  },
})

const sentAcceptPayment = []
const challenges = []
const mppx = Mppx.create({
  methods: [lightning],
  polyfill: false,
  fetch: async (input, init) => {
    const headers = new Headers(init?.headers)
    sentAcceptPayment.push(headers.get('accept-payment'))
    const resp = await rawFetch(input, init)
    if (resp.status === 402) challenges.push(resp.headers.get('www-authenticate'))
    return resp
  },
})

for (const body of bodies) {
  paid.length = 0
  sentAcceptPayment.length = 0
  challenges.length = 0
  const resp = await mppx.fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
  })
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
      acceptPayment: [...sentAcceptPayment],
      challenges: [...challenges],
    }),
  )
}
