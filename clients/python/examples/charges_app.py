"""POST /charges, idempotent (docs/clients/python.md, "Idempotent
endpoints"): FastAPI with skiplock's middleware.  The charge row and the
stored response commit in one transaction, so a retry after a lost
response replays it and never charges twice.

    DATABASE_URL=... python3 charges_app.py --port 8080
    curl -i -X POST localhost:8080/charges -H 'Idempotency-Key: order-42' \\
         -H 'content-type: application/json' -d '{"amount": 1250, "currency": "usd"}'

It uses this table (the test that runs it creates it):

    CREATE TABLE charges (id bigserial PRIMARY KEY, amount bigint NOT NULL,
                          currency text NOT NULL);
"""

import argparse
import os

import psycopg
import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from skiplock.asgi import IdempotencyMiddleware, claim_of

URL = os.environ["DATABASE_URL"]

app = FastAPI()
app.add_middleware(IdempotencyMiddleware, source=URL, require_key=True, recovery=10)


class Charge(BaseModel):
    amount: int = Field(gt=0)
    currency: str = Field(min_length=3, max_length=3)


@app.post("/charges", status_code=201)
async def charge(body: Charge, request: Request) -> JSONResponse:
    claim = claim_of(request)
    async with await psycopg.AsyncConnection.connect(URL, prepare_threshold=None) as conn:
        async with conn.transaction():
            cur = await conn.execute(
                "INSERT INTO charges (amount, currency) VALUES (%s, %s) RETURNING id",
                [body.amount, body.currency])
            row = await cur.fetchone()
            assert row is not None
            response = JSONResponse({"id": row[0], "amount": body.amount,
                                     "currency": body.currency}, status_code=201)
            if claim is not None:
                await claim.complete(conn, response)  # commits with the charge, or neither
    return response


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args()
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
