"""Money going back out through the node: refunds (one-time LNURL-withdraw links),
deposits paid back, and the routing-fee budget of every payout."""
