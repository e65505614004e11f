import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as path from 'node:path';
import { describe, it } from 'node:test';

// package.json as VS Code reads it: in an untrusted workspace VS Code hands the extension only the
// user's own values of the settings listed in restrictedConfigurations.
const manifest = JSON.parse(fs.readFileSync(path.join(__dirname, '..', '..', 'package.json'), 'utf8'));

describe('untrusted workspaces', () => {
  it('cannot choose the program run, where code goes, its credentials, or the repository it lands in', () => {
    const restricted: string[] = manifest.capabilities.untrustedWorkspaces.restrictedConfigurations;
    // repository: a cloned workspace naming another repository the user is granted would send
    // this workspace's saves into that repository's shared index
    for (const key of ['serverPath', 'natsUrl', 'credentials', 'repository']) {
      assert.ok(restricted.includes(`ctxpress.${key}`), `ctxpress.${key} must be restricted`);
    }
    assert.equal(manifest.capabilities.untrustedWorkspaces.supported, 'limited');
  });
});
