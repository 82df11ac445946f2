"""The app of test_asgi.py, served by uvicorn: each endpoint writes its
effect to public.t_effects (key, route).  T_SLOW (seconds, default 0)
makes /slow wait before its effect; the middleware's recovery window is
T_RECOVERY seconds (default 60)."""

import asyncio
import os

import psycopg
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, PlainTextResponse

from skiplock.asgi import IdempotencyMiddleware, claim_of

URL = os.environ["DATABASE_URL"]

app = FastAPI()
app.add_middleware(IdempotencyMiddleware, source=URL, max_body=4096,
                   max_response_bytes=8192, recovery=float(os.environ.get("T_RECOVERY", 60)))


async def effect(request: Request, route: str, complete: bool = False) -> JSONResponse:
    key = request.headers.get("idempotency-key")
    async with await psycopg.AsyncConnection.connect(URL, prepare_threshold=None) as conn:
        async with conn.transaction():
            cur = await conn.execute("INSERT INTO public.t_effects (key, route) VALUES (%s, %s) "
                                     "RETURNING n", [key, route])
            row = await cur.fetchone()
            assert row is not None
            response = JSONResponse({"n": row[0], "route": route, "body": await request.json()},
                                    status_code=201, headers={"location": f"/things/{row[0]}"})
            claim = claim_of(request)
            if complete and claim is not None:
                await claim.complete(conn, response)
    return response


@app.post("/work")
async def work(request: Request) -> JSONResponse:
    return await effect(request, "work")


@app.post("/work-in-tx")
async def work_in_tx(request: Request) -> JSONResponse:
    return await effect(request, "work-in-tx", complete=True)


@app.post("/slow")
async def slow(request: Request) -> JSONResponse:
    await asyncio.sleep(float(os.environ.get("T_SLOW", "0")))
    return await effect(request, "slow")


@app.post("/boom")
async def boom(request: Request) -> JSONResponse:
    await effect(request, "boom-attempt")
    raise RuntimeError("the handler failed")


@app.post("/big")
async def big(request: Request) -> PlainTextResponse:
    await effect(request, "big")
    return PlainTextResponse("x" * 10000)


@app.get("/plain")
async def plain() -> PlainTextResponse:
    return PlainTextResponse("no key needed")
