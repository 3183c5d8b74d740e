"""What is sold and at what price: the model catalog, model selection, prices, the
BTC-pegged rates and the planned services."""
