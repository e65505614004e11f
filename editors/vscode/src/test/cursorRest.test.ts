import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { RestTimer } from '../cursorRest';

const KEYBOARD = 1;
const MOUSE = 2;

function sleep(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

describe('cursor rest', () => {
  it('reports the last place a click or a jump moved to, once the cursor stayed there', async () => {
    const rested: string[] = [];
    const timer = new RestTimer<string>(40, (place) => rested.push(place));
    timer.moved(MOUSE, 'a.py:10');
    timer.moved(KEYBOARD, 'a.py:11');
    timer.moved(KEYBOARD, 'a.py:12');
    await sleep(10);
    assert.deepEqual(rested, []);
    await sleep(80);
    assert.deepEqual(rested, ['a.py:12']);
  });

  it('says nothing when typing moved the cursor, and a keystroke cancels a pending rest', async () => {
    const rested: string[] = [];
    const timer = new RestTimer<string>(30, (place) => rested.push(place));
    timer.moved(undefined, 'a.py:3');
    timer.moved(MOUSE, 'a.py:40');
    timer.moved(undefined, 'a.py:40'); // typed right after the click
    await sleep(80);
    assert.deepEqual(rested, []);
  });
});
