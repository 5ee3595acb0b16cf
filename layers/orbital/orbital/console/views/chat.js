// PLACEHOLDER: replaced by the real view.
import { header } from "../ui.js";

export default {
  id: "chat",
  title: "Chat",
  icon: "chat",
  mount(container) {
    container.append(header("Chat"));
    return () => {};
  },
};
