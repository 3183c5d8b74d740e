"""The HTTP edge: what every request meets before a service does. JSON input and
answers, the error envelope, rate limits and challenge admission, and the guard on
connections (sizes, time limits, counts)."""
