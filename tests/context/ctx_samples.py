"""Small real-looking source files, one per supported language, with a marked cursor.

Each sample has ``CURSOR`` where the user is typing; ``split_cursor`` returns the text without the
marker and the 0-based (line, column) of the cursor.
"""

from __future__ import annotations

PYTHON = '''\
"""Order book utilities."""
from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterable

MAX_LEVELS = 50
TICK_SIZE = 0.01
_REGISTRY: dict[str, "OrderBook"] = {}


def round_to_tick(price: float, tick: float = TICK_SIZE) -> float:
    """Round a price to the nearest tick."""
    return round(price / tick) * tick


def unused_helper(values: Iterable[int]) -> int:
    """Sum values; nobody calls this."""
    total = 0
    for v in values:
        total += v
    return total


def spread_bps(bid: float, ask: float) -> float:
    """Spread in basis points."""
    mid = (bid + ask) / 2
    return (ask - bid) / mid * 10_000


@dataclass
class Level:
    """One price level."""

    price: float
    size: float = 0.0


class OrderBook:
    """A two-sided limit order book."""

    symbol: str
    depth: int = MAX_LEVELS

    def __init__(self, symbol: str, depth: int = MAX_LEVELS) -> None:
        self.symbol = symbol
        self.depth = depth
        self.bids: dict[float, Level] = defaultdict(lambda: Level(0.0))
        self.asks: dict[float, Level] = {}

    def best_bid(self) -> float | None:
        """Highest bid price."""
        return max(self.bids) if self.bids else None

    def best_ask(self) -> float | None:
        """Lowest ask price."""
        return min(self.asks) if self.asks else None

    def add(self, side: str, price: float, size: float) -> None:
        """Add size at a price."""
        price = round_to_tick(price)
        book = self.bids if side == "buy" else self.asks
        level = book.setdefault(price, Level(price))
        level.size += size

    def quote(self) -> tuple[float, float]:
        """Best bid and ask, with the spread checked."""
        bid, ask = self.best_bid(), self.best_ask()
        if bid is None or ask is None:
            raise ValueError("one-sided book")
        width = spread_bps(bid, ask)
        if width > 500:
            CURSOR
        return bid, ask

    def clear(self) -> None:
        self.bids.clear()
        self.asks.clear()


def load_books(symbols: list[str]) -> list[OrderBook]:
    return [OrderBook(s) for s in symbols]
'''

JAVASCRIPT = '''\
import { EventEmitter } from "events";
import fs from "fs";

const DEFAULT_TTL = 60_000;

function now() {
  return Date.now();
}

function neverCalled(a, b) {
  return a + b;
}

/** A TTL cache. */
export class TtlCache extends EventEmitter {
  entries = new Map();

  constructor(ttl = DEFAULT_TTL) {
    super();
    this.ttl = ttl;
  }

  isExpired(entry) {
    return now() - entry.at > this.ttl;
  }

  get(key) {
    const entry = this.entries.get(key);
    if (!entry || this.isExpired(entry)) {
      CURSOR
    }
    return entry.value;
  }
}
'''

TYPESCRIPT = '''\
import { Request, Response } from "express";
import * as db from "./db";

export const PAGE_SIZE = 20;

export interface User {
  id: number;
  name: string;
}

/** Parse a page number from the query string. */
function parsePage(raw: string | undefined): number {
  const n = Number(raw ?? "1");
  return Number.isFinite(n) && n > 0 ? n : 1;
}

function formatUser(u: User): string {
  return `${u.id}:${u.name}`;
}

export class UserController {
  private readonly repo: db.Repo<User>;

  constructor(repo: db.Repo<User>) {
    this.repo = repo;
  }

  async list(req: Request, res: Response): Promise<void> {
    const page = parsePage(req.query.page as string);
    const users = await this.repo.find({ offset: (page - 1) * PAGE_SIZE, limit: PAGE_SIZE });
    res.json(users.map(CURSOR));
  }
}
'''

TSX = '''\
import React, { useState } from "react";

type Props = { items: string[]; onPick: (item: string) => void };

function label(item: string): string {
  return item.toUpperCase();
}

export function Picker({ items, onPick }: Props) {
  const [selected, setSelected] = useState<string | null>(null);
  return (
    <ul>
      {items.map((item) => (
        <li key={item} onClick={() => { setSelected(item); onPick(item); }}>
          {label(item)}CURSOR
        </li>
      ))}
    </ul>
  );
}
'''

GO = '''\
package cache

import (
\t"sync"
\t"time"
)

const DefaultTTL = time.Minute

// Entry is one cached value.
type Entry struct {
\tValue     []byte
\tExpiresAt time.Time
}

// Cache is a TTL cache safe for concurrent use.
type Cache struct {
\tmu      sync.Mutex
\tentries map[string]Entry
\tttl     time.Duration
}

// NewCache makes an empty cache.
func NewCache(ttl time.Duration) *Cache {
\treturn &Cache{entries: make(map[string]Entry), ttl: ttl}
}

func expired(e Entry, now time.Time) bool {
\treturn now.After(e.ExpiresAt)
}

func unrelated() int { return 42 }

// Get returns the value for key, if present and fresh.
func (c *Cache) Get(key string) ([]byte, bool) {
\tc.mu.Lock()
\tdefer c.mu.Unlock()
\te, ok := c.entries[key]
\tif !ok || expired(e, time.Now()) {
\t\tCURSOR
\t}
\treturn e.Value, true
}
'''

JAVA = '''\
package com.example.billing;

import java.math.BigDecimal;
import java.util.List;

/** Computes invoice totals. */
public class InvoiceCalculator {
    private static final BigDecimal TAX_RATE = new BigDecimal("0.2");
    private final List<LineItem> items;

    public InvoiceCalculator(List<LineItem> items) {
        this.items = items;
    }

    private BigDecimal subtotal() {
        BigDecimal sum = BigDecimal.ZERO;
        for (LineItem item : items) {
            sum = sum.add(item.price());
        }
        return sum;
    }

    private String unusedDescribe() {
        return "calculator";
    }

    public BigDecimal total() {
        BigDecimal base = subtotal();
        CURSOR
    }
}
'''

RUST = '''\
use std::collections::HashMap;
use std::time::{Duration, Instant};

const MAX_ENTRIES: usize = 1024;

/// A cached value.
#[derive(Debug, Clone)]
pub struct Entry {
    value: Vec<u8>,
    at: Instant,
}

pub struct Cache {
    entries: HashMap<String, Entry>,
    ttl: Duration,
}

fn is_fresh(e: &Entry, ttl: Duration) -> bool {
    e.at.elapsed() < ttl
}

fn unrelated() -> u32 {
    7
}

impl Cache {
    /// Make an empty cache.
    pub fn new(ttl: Duration) -> Self {
        Cache { entries: HashMap::new(), ttl }
    }

    pub fn get(&self, key: &str) -> Option<&[u8]> {
        let e = self.entries.get(key)?;
        if !is_fresh(e, self.ttl) {
            CURSOR
        }
        Some(&e.value)
    }
}
'''

C = '''\
#include <stdio.h>
#include <stdlib.h>

#define BUF_SIZE 256

struct buffer {
    char *data;
    size_t len;
};

/* Grow a buffer to hold at least n bytes. */
static int grow(struct buffer *b, size_t n) {
    char *p = realloc(b->data, n);
    if (!p) return -1;
    b->data = p;
    return 0;
}

static int unused(int x) { return x * 2; }

int append(struct buffer *b, const char *s, size_t n) {
    if (b->len + n > BUF_SIZE && grow(b, b->len + n) != 0) {
        CURSOR
    }
    return 0;
}
'''

CPP = '''\
#include <string>
#include <vector>

namespace geo {

constexpr double kEpsilon = 1e-9;

struct Point {
  double x;
  double y;
};

double cross(const Point& a, const Point& b) { return a.x * b.y - a.y * b.x; }

double unused_metric(const Point& a) { return a.x + a.y; }

class Polygon {
 public:
  explicit Polygon(std::vector<Point> pts) : pts_(std::move(pts)) {}

  double area() const {
    double sum = 0;
    for (size_t i = 0; i < pts_.size(); ++i) {
      sum += cross(pts_[i], pts_[(i + 1) % pts_.size()]);
    }
    CURSOR
  }

 private:
  std::vector<Point> pts_;
};

}  // namespace geo
'''

SAMPLES: dict[str, tuple[str, str]] = {
    # language: (file name, text with CURSOR)
    "python": ("orderbook.py", PYTHON),
    "javascript": ("cache.js", JAVASCRIPT),
    "typescript": ("users.ts", TYPESCRIPT),
    "tsx": ("Picker.tsx", TSX),
    "go": ("cache.go", GO),
    "java": ("InvoiceCalculator.java", JAVA),
    "rust": ("cache.rs", RUST),
    "c": ("buffer.c", C),
    "cpp": ("polygon.cpp", CPP),
}

# The enclosing function, a referenced same-file helper, and an unreferenced one, per language.
EXPECTED: dict[str, tuple[str, str, str]] = {
    "python": ("quote", "spread_bps", "unused_helper"),
    "javascript": ("get", "isExpired", "neverCalled"),
    "typescript": ("list", "parsePage", "formatUser"),
    "tsx": ("Picker", "label", ""),
    "go": ("Get", "expired", "unrelated"),
    "java": ("total", "subtotal", "unusedDescribe"),
    "rust": ("get", "is_fresh", "unrelated"),
    "c": ("append", "grow", "unused"),
    "cpp": ("area", "cross", "unused_metric"),
}


def split_cursor(text: str) -> tuple[str, int, int]:
    idx = text.index("CURSOR")
    before = text[:idx]
    line = before.count("\n")
    column = len(before) - (before.rfind("\n") + 1)
    return text.replace("CURSOR", "", 1), line, column


# The samples here are small files that fit the default budget whole; tests of cropping ask for
# the cropping path itself (the whole-file and fill-below strategies have their own tests).
CROP_ONLY = {"whole_file": False, "fill_below": False}
