// recorder-worklet.js — the microphone's samples to the page (clone.js), block by block.
class Recorder extends AudioWorkletProcessor {
  process(inputs) {
    const ch = inputs[0] && inputs[0][0];
    if (ch) this.port.postMessage(ch.slice(0));
    return true;
  }
}
registerProcessor('qvoice-recorder', Recorder);
