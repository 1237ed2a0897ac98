// The one place the console gets its view library from: preact, with htm's
// tagged templates instead of JSX (no compiler step; see docs/design/console.md).
import { h, render, Fragment } from 'preact';
import { useState, useEffect, useMemo, useRef, useCallback } from 'preact/hooks';
import htm from 'htm';

export const html = htm.bind(h);
export { h, render, Fragment, useState, useEffect, useMemo, useRef, useCallback };
